"""Pre-flight check of a Ray cluster launcher YAML with Ray's own validator, before `ray up`.

Runs what the autoscaler runs on the file: `prepare_config` (merges the provider's defaults)
then `validate_config` (Ray's JSON schema and its cross-field rules); the fake multi-node
provider's file is validated raw, as its monitor does (its defaults file is not in the wheel).
Exit status 0 and `ok: ...` if Ray accepts the file, else 2 and a one-line error naming the key.

    python -m sweeper.check_cluster cluster/aws.yaml
    pytest tests/test_reliability.py -q -k cluster
"""
from __future__ import annotations

import argparse
import copy
import logging
import sys
from pathlib import Path

import yaml

from trainables.files import one_line

SCHEMA = "ray/autoscaler/ray-schema.json"


class ClusterConfigError(ValueError):
    """Ray would reject the cluster YAML; the one-line message names the key and the fix."""


def load_yaml(path: Path) -> dict:
    if not path.is_file():
        raise ClusterConfigError(f"{path} does not exist; pass a launcher YAML such as cluster/aws.yaml")
    try:
        cfg = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ClusterConfigError(f"{path} is not valid YAML{where} ({one_line(str(getattr(e, 'problem', e)), 300)}); "
                                 f"fix the syntax there") from None
    if not isinstance(cfg, dict):
        raise ClusterConfigError(f"{path} holds a YAML {type(cfg).__name__}, not a cluster config mapping; "
                                 f"start from cluster/aws.yaml")
    provider = cfg.get("provider")
    if not isinstance(provider, dict) or not isinstance(provider.get("type"), str):
        raise ClusterConfigError(f"{path}: no provider.type; set provider: {{type: aws | gcp | ...}} "
                                 f"(see cluster/aws.yaml)")
    return cfg


def check_cluster(path: str | Path) -> dict:
    """The config as Ray prepares it if Ray accepts the file at `path`; else ClusterConfigError."""
    import jsonschema
    from ray.autoscaler._private.util import prepare_config, validate_config

    path = Path(path)
    cfg = load_yaml(path)
    logging.getLogger("ray.autoscaler").setLevel(logging.WARNING)  # prepare_config logs its defaults at INFO
    try:
        prepared = copy.deepcopy(cfg)
        if cfg["provider"]["type"] != "fake_multinode":
            prepared = prepare_config(prepared)
        validate_config(prepared)
    except jsonschema.ValidationError as e:
        where = ".".join(map(str, e.absolute_path)) or "top level"
        raise ClusterConfigError(f"{path}: {where}: {one_line(e.message, 300)}; fix that key "
                                 f"(Ray's schema: {SCHEMA})") from None
    except KeyError as e:
        raise ClusterConfigError(f"{path}: required key {e} is missing; add it (see cluster/aws.yaml)") from None
    except (ValueError, NotImplementedError) as e:  # Ray's cross-field rules, an unknown provider type
        raise ClusterConfigError(f"{path}: {one_line(str(e), 300)}; fix the file (see cluster/README.md)") from None
    return prepared


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sweeper.check_cluster", description=__doc__.splitlines()[0])
    p.add_argument("config", help="a Ray cluster launcher YAML, e.g. cluster/aws.yaml")
    args = p.parse_args(argv)
    try:
        cfg = check_cluster(args.config)
    except ClusterConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    types = ", ".join(sorted(cfg.get("available_node_types", {}))) or "-"
    print(f"ok: {args.config} passes Ray's validation (provider {cfg['provider']['type']}, "
          f"max_workers {cfg.get('max_workers')}, node types {types})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
