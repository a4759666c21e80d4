"""A plain-text picture of the code location: what a reviewer must see change when the graph changes.

One line per asset (partitions, upstream keys with their partition mappings, group, kinds, pools, backfill
policy, automation condition), per check (target, blocking, partitions, pool, automation condition), per job (selected assets and checks, partitions),
per schedule and per sensor; sorted, so the text depends on the graph only.
"""

from __future__ import annotations

import dagster as dg


def describe_location(defs: dg.Definitions) -> str:
    graph = defs.resolve_asset_graph()
    lines = ["# assets"]
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        lines.append(_asset_line(graph, graph.get(key)))
    lines.append("# checks")
    for check in sorted(graph.asset_check_keys, key=lambda k: (k.asset_key.to_user_string(), k.name)):
        lines.append(_check_line(graph, check))
    lines.append("# jobs")
    for job in sorted(defs.resolve_all_job_defs(), key=lambda j: j.name):
        if job.name != "__ASSET_JOB":
            lines.append(_job_line(job))
    lines.append("# schedules")
    lines += sorted(f"{s.name}: job={s.job_name} cron={s.cron_schedule} default={s.default_status.value}"
                    for s in defs.schedules or [])
    lines.append("# sensors")
    lines += sorted(f"{s.name}: {type(s).__name__} default={s.default_status.value} "
                    f"interval={s.minimum_interval_seconds}" for s in defs.sensors or [])
    return "\n".join(lines) + "\n"


def _asset_line(graph, node) -> str:
    deps = ", ".join(sorted(f"{parent.to_user_string()}{_mapping(node, parent)}" for parent in node.parent_keys))
    condition = node.automation_condition.get_label() if node.automation_condition else None
    return (f"{node.key.to_user_string()}: {'observable' if node.is_observable else 'materializable'} "
            f"partitions={_partitions(node.partitions_def)} deps=[{deps}] group={node.group_name} "
            f"kinds={sorted(node.kinds)} pools={sorted(node.pools or [])} backfill={_backfill(node)} "
            f"automation={condition!r}")


def _backfill(node) -> str:
    policy = node.backfill_policy
    if node.partitions_def is None:
        return "-"
    if policy is None:
        return "run-per-partition"
    return policy.policy_type.value.lower() + (f"<={policy.max_partitions_per_run}" if policy.max_partitions_per_run else "")


def _mapping(node, parent) -> str:
    mapping = node.partition_mappings.get(parent)
    return "" if mapping is None else f" via {type(mapping).__name__}"


def _check_line(graph, check) -> str:
    spec = graph.get(check)
    pool = graph.assets_def_for_key(check).node_def.pool
    condition = graph.get(check).automation_condition
    return (f"{check.asset_key.to_user_string()}:{check.name}: blocking={spec.blocking} "
            f"partitions={_partitions(spec.partitions_def)} pool={pool} "
            f"automation={condition.get_label() if condition else None!r}")


def _job_line(job) -> str:
    selected = sorted(k.to_user_string() for k in job.asset_layer.selected_asset_keys)
    checks = sorted(f"{k.asset_key.to_user_string()}:{k.name}" for k in job.asset_layer.asset_graph.asset_check_keys)
    return f"{job.name}: assets={selected} checks={checks} partitions={_partitions(job.partitions_def)}"


def _partitions(partitions) -> str:
    if partitions is None:
        return "-"
    if isinstance(partitions, dg.MultiPartitionsDefinition):
        return " x ".join(f"{d.name}{_partitions(d.partitions_def)}" for d in partitions.partitions_defs)
    return "[" + ",".join(partitions.get_partition_keys()) + "]"
