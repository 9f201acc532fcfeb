// `kvidx-sim ttft`: routing policies compared by the latency users feel, on
// a latency-modelled fleet with a real kvidx-server in the loop
// (tools/sim/timed_run.h; docs/ROUTING.md has the table and the commands).
#pragma once

namespace kvidx::sim {

// argv[0] is "ttft". Exit codes: 0 = every policy ran; 1 = a run failed;
// 2 = usage error.
int TtftMain(int argc, char** argv);

}  // namespace kvidx::sim
