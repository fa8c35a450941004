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

Each name is imported from its module on first use: `nvrx.config.values` alone does not load
the layers that read files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nvrx import lazy_names

if TYPE_CHECKING:
    from nvrx.config.errors import ConfigError
    from nvrx.config.load import (
        ConfigSource,
        LoadedConfig,
        Origin,
        find_config_file,
        load_config,
        parse_assignments,
        read_env_file,
        read_environment,
    )
    from nvrx.config.model import (
        FIELDS,
        MAX_ARRAY_TASKS,
        MAX_CHAIN_DEPTH,
        ONE_HOST_PORTS,
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

# Where each name lives: imported on first use, so that importing one module of the package
# loads that module only (a pure module never drags in the ones that run commands or read
# files through this package).
_WHERE = {
    "ChainSettings": "nvrx.config.model",
    "ConfigSource": "nvrx.config.load",
    "ConfigError": "nvrx.config.errors",
    "Dimension": "nvrx.config.model",
    "ENV_ALIASES": "nvrx.config.names",
    "ENV_NAMES": "nvrx.config.names",
    "FIELDS": "nvrx.config.model",
    "HIDDEN": "nvrx.config.redact",
    "InjectSettings": "nvrx.config.model",
    "LimitsSettings": "nvrx.config.model",
    "LoadedConfig": "nvrx.config.load",
    "MAX_ARRAY_TASKS": "nvrx.config.model",
    "MAX_CHAIN_DEPTH": "nvrx.config.model",
    "MAX_SECONDS": "nvrx.config.values",
    "NvrxConfig": "nvrx.config.model",
    "ONE_HOST_PORTS": "nvrx.config.model",
    "Origin": "nvrx.config.load",
    "SECTIONS": "nvrx.config.model",
    "STOP_DIMENSIONS": "nvrx.config.model",
    "ScoreSettings": "nvrx.config.model",
    "SlurmName": "nvrx.config.values",
    "SlurmSettings": "nvrx.config.model",
    "SlurmTime": "nvrx.config.values",
    "WatchSettings": "nvrx.config.model",
    "canonical_env_name": "nvrx.config.names",
    "env_names_for": "nvrx.config.names",
    "find_config_file": "nvrx.config.load",
    "is_secret": "nvrx.config.model",
    "known_secrets": "nvrx.config.secrets",
    "load_config": "nvrx.config.load",
    "parse_assignments": "nvrx.config.load",
    "read_env_file": "nvrx.config.load",
    "read_environment": "nvrx.config.load",
    "redact_argv": "nvrx.config.secrets",
    "redact_text": "nvrx.config.redact",
    "redact_urls": "nvrx.config.redact",
    "secret_env_values": "nvrx.config.redact",
}

__all__ = [
    "ENV_ALIASES",
    "ENV_NAMES",
    "FIELDS",
    "HIDDEN",
    "MAX_ARRAY_TASKS",
    "MAX_CHAIN_DEPTH",
    "MAX_SECONDS",
    "ONE_HOST_PORTS",
    "SECTIONS",
    "STOP_DIMENSIONS",
    "ChainSettings",
    "ConfigError",
    "ConfigSource",
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
    "parse_assignments",
    "read_env_file",
    "read_environment",
    "redact_argv",
    "redact_text",
    "redact_urls",
    "secret_env_values",
]

__getattr__ = lazy_names(__name__, _WHERE)
