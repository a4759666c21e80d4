"""When checks run under automation."""

import dagster as dg

# Every check runs with its asset whatever launched the run (a run launched by the automation sensor executes
# only the checks it requests), and after a materialisation made without it (from the UI, say): the gates
# downstream (`all_deps_blocking_checks_passed`) then always have a verdict on the latest data.
WITH_ITS_ASSET = dg.AutomationCondition.eager().with_label("with its asset")
