#pragma once
// Events for TORCHLITE_LOGS (graph_breaks, recompiles, guards, graph): routed
// to Python's `logging` under the "torchlite" logger by a sink the Python
// package registers at import.
#include <string>

#include "core/py_ref.h"

namespace tl {

// True when the channel is listed in TORCHLITE_LOGS (read at import, and
// again after set_log_channels).
bool log_enabled(const char* channel);
void set_log_channels(const std::string& comma_separated);
// Sends one message to the sink (a Python callable (channel, message)).
// Never throws; a failing sink is ignored.
void log_event(const char* channel, const std::string& message);
void set_log_sink(PyObject* callable);  // borrows, keeps a reference

// A RuntimeWarning for a problem the user must fix (an untrusted cache or dump
// folder), once per distinct message. Never throws; printed to stderr instead
// when this thread does not hold the GIL (a compile worker must never wait for it).
void warn_user(const std::string& message);

}  // namespace tl
