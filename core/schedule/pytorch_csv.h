// PyTorch's schedule CSV (torch.distributed.pipelining 2.11, `_PipelineScheduleRuntime._dump_csv`
// and `_load_csv`): one row per rank, one action per cell, in the same text as ours ("0F1" stage 0
// forward of micro-batch 1; "1I0", "1W0", "2B3"; with communication "0SEND_F0", "1RECV_F0",
// "1SEND_B0", "0RECV_B0"). Its "compute_only" form has compute actions only, and PyTorch adds the
// communication itself; "compute_comms" has both, and PyTorch runs them as written.
//
// Reading also takes what PyTorch's own lowering writes: empty cells (idle slots) are skipped;
// DualPipeV's overlapped pairs "(0F3;1B2)OVERLAP_F_B" become their two actions in order (one
// compute stream runs them one after the other); UNSHARD, RESHARD and REDUCE_GRAD (FSDP's
// parameter gathers and the data-parallel gradient reduction, which our simulator prices as the
// step's all-reduce) are left out and counted.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/plan.h"
#include "core/schedule/schedule.h"
#include "core/status.h"

namespace gpipe {

/// The rows of `schedule`, one per rank (compute-only or with communication, as it is).
std::string ScheduleToPytorchCsv(const Schedule& schedule);

struct PytorchCsvSchedule {
  Schedule schedule;
  /// UNSHARD, RESHARD and REDUCE_GRAD cells left out.
  int left_out = 0;
  /// The file has communication actions (PyTorch's "compute_comms").
  bool with_communication = false;
};

/// Parses a CSV for a pipeline of `stages` stages and `microbatches` micro-batches; `where` (the
/// file's name) prefixes errors, which name the row (rank) and column of a bad cell.
Expected<PytorchCsvSchedule> ScheduleFromPytorchCsv(std::string_view text, int stages, int microbatches,
                                                    const std::string& where);

/// The torch.distributed.pipelining class that runs `kind`'s order: "ScheduleGPipe",
/// "Schedule1F1B", "ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble" (zb-h1 and
/// interleaved-zb), "ScheduleZBVZeroBubble", "ScheduleDualPipeV".
const char* PytorchScheduleClass(ScheduleKind kind);

/// What a PyTorch trainer needs besides the CSV (format "gpipe-plan-stages/1"): K, M, D, the
/// global batch, the PyTorch class that runs the kind, the CSV's format ("compute_only" or
/// "compute_comms"), t and the optimizer's sharding the split assumes (`tensor_parallel`,
/// `sharded_optimizer`), and per stage its rank, layers [first, end), their names and remat.
nlohmann::json PytorchStagesJson(const Plan& plan, bool with_communication);

}  // namespace gpipe
