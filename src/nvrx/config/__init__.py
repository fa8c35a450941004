"""The one nvrx configuration: a pydantic model with a section per subcommand.

Layers, lowest first; each later layer overrides single keys of the earlier ones:

1. built-in defaults (the upstream defaults; docs/configuration.md),
2. a YAML file: `--config PATH`, else `$NVRX_CONFIG`, else `./nvrx.yaml`, else
   `~/.config/nvrx/config.yaml`,
3. a `user.env`-style `KEY=VALUE` file when one is given (`--env-file`, `$NVRX_ENV_FILE`),
4. the environment: `NVRX_<SECTION>_<FIELD>` for every field, plus the upstream variable names
   of `ENV_ALIASES` (one table, documented in docs/configuration.md),
5. command-line flags.

Every effective value remembers the layer it came from (`LoadedConfig.origins`), which is what
`nvrx config show` prints. Errors are one line: an unknown key names the key and the file, a bad
value names key, value and source.

Modules: `values` (how text becomes a typed value), `model` (the sections), `names` (environment
names), `load` (the layers), `yamlfile` and `shellwords` (the two file syntaxes), `redact` and
`secrets` (masking). This package re-exports what the rest of nvrx uses; yaml is imported only
when a YAML file is read.
"""

from nvrx.config.errors import ConfigError
from nvrx.config.load import (
    LoadedConfig,
    Origin,
    find_config_file,
    load_config,
    load_for_command,
    parse_assignments,
    read_env_file,
    read_environment,
)
from nvrx.config.model import (
    FIELDS,
    MAX_ARRAY_TASKS,
    MAX_CHAIN_DEPTH,
    SECTIONS,
    STOP_DIMENSIONS,
    ChainSettings,
    Dimension,
    InjectSettings,
    LimitsSettings,
    NvrxConfig,
    ScoreSettings,
    SlurmSettings,
    WatchSettings,
    is_secret,
)
from nvrx.config.names import ENV_ALIASES, ENV_NAMES, canonical_env_name, env_names_for
from nvrx.config.redact import HIDDEN, redact_text, redact_urls, secret_env_values
from nvrx.config.secrets import known_secrets, redact_argv
from nvrx.config.values import MAX_SECONDS, SlurmName, SlurmTime

__all__ = [
    "ENV_ALIASES",
    "ENV_NAMES",
    "FIELDS",
    "HIDDEN",
    "MAX_ARRAY_TASKS",
    "MAX_CHAIN_DEPTH",
    "MAX_SECONDS",
    "SECTIONS",
    "STOP_DIMENSIONS",
    "ChainSettings",
    "ConfigError",
    "Dimension",
    "InjectSettings",
    "LimitsSettings",
    "LoadedConfig",
    "NvrxConfig",
    "Origin",
    "ScoreSettings",
    "SlurmName",
    "SlurmSettings",
    "SlurmTime",
    "WatchSettings",
    "canonical_env_name",
    "env_names_for",
    "find_config_file",
    "is_secret",
    "known_secrets",
    "load_config",
    "load_for_command",
    "parse_assignments",
    "read_env_file",
    "read_environment",
    "redact_argv",
    "redact_text",
    "redact_urls",
    "secret_env_values",
]
