"""The built-in analysers: NCCL flight-recorder dumps (`fr`) and job logs (`logscan`, the
streaming scan; `logattr`, the rules over it). Functions of data, plus `command` for
`nvrx analyze`."""
