"""`focus_trace`: a metric id looked up from the UI. Launched from the Launchpad with the id of any number of the
arena report (hover it) or any row of `metrics.values`, its run shows the chain `focus trace ID` prints: what the
number was computed from, as recorded when it was computed (predictions, model output, weights, labels, records,
release, files), and what is newer now. It reads the tables and the artifacts only and writes nothing.
"""

from types import SimpleNamespace

import dagster as dg
from pydantic import Field

from resources import FocusStorage

TRACE_JOB = "focus_trace"


class TraceConfig(dg.Config):
    metric_id: str = Field(description="The metric_id of a number: hover it in the arena report, or take it from "
                                       "a row of metrics.values (or metrics.lora_effects, metrics.robustness).")


@dg.op(description="The recorded chain behind one metric id, as `focus trace ID` prints it, in the run's logs and "
                   "as Markdown on its output.", out=dg.Out(dg.Nothing))
def trace_metric(context: dg.OpExecutionContext, config: TraceConfig, storage: FocusStorage):
    from focus_dagster.platform.trace import TraceError, format_trace, trace

    where = SimpleNamespace(tables=storage.tables_url, artifacts=storage.artifacts_dir)
    try:
        result = trace(config.metric_id.strip(), where)
    except TraceError as exc:
        raise dg.Failure(description=str(exc)) from exc
    text = format_trace(result)
    context.log.info(text)
    return dg.Output(None, metadata={"metric_id": result["metric_id"], "stale": result["stale"],
                                     "links": len(result["links"]),
                                     "chain": dg.MetadataValue.md(f"```\n{text}\n```")})


@dg.job(name=TRACE_JOB, executor_def=dg.in_process_executor,
        description="Look up a metric id: launch with its id (ops.trace_metric.config.metric_id) to see the files, "
                    "labels, model weights, runs and code version behind that number.")
def focus_trace():
    trace_metric()


def definitions() -> dg.Definitions:
    return dg.Definitions(jobs=[focus_trace])
