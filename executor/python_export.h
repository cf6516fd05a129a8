// A model written as a Python function ("python": "file.py:function" in a gpipe-model/1 file)
// reaches the native executor as a TorchScript file: executor/export_model.py (embedded in the
// binary) calls the function, traces each child of the nn.Sequential it returns on the model's
// example micro-batch and saves them, with the parameters they share ("ties"), into one file. No
// Python runs in the planner or the simulator, nor in a rank: the file is made once, before any
// rank starts, and cached by what it depends on (the source file, the function, the input, the
// seed, the exporter), so a launcher's ranks and later commands find it.
#pragma once

#include <string>

#include "core/model.h"
#include "core/status.h"

namespace gpipe::executor {

/// For a "python" model, makes (or finds in the cache) its TorchScript file and sets
/// model->torchscript_path; does nothing for other models. The cache is $GPIPE_CACHE_DIR, else
/// $XDG_CACHE_HOME/gpipe-plan, else ~/.cache/gpipe-plan; the interpreter $GPIPE_PYTHON, else
/// python3. Errors carry the exporter's one line (the layer, what it got, what it returned).
Status ExportPythonModel(ModelSpec* model);

/// The exporter's source, as embedded at build time.
const std::string& ExporterSource();

}  // namespace gpipe::executor
