#include "core/log.h"

#include <cstdio>
#include <mutex>
#include <set>
#include <sstream>

namespace tl {
namespace {
std::mutex g_mu;
std::set<std::string> g_channels;
PyObject* g_sink = nullptr;  // owned; replaced under g_mu with the GIL held
std::set<std::string> g_warned;
}  // namespace

void set_log_channels(const std::string& csv) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_channels.clear();
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    while (!item.empty() && isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
    while (!item.empty() && isspace(static_cast<unsigned char>(item.front()))) item.erase(0, 1);
    if (!item.empty()) g_channels.insert(item);
  }
}

bool log_enabled(const char* channel) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_channels.count(channel) || g_channels.count("all");
}

void set_log_sink(PyObject* callable) {
  std::lock_guard<std::mutex> lock(g_mu);
  Py_XINCREF(callable);
  Py_XDECREF(g_sink);
  g_sink = callable;
}

void log_event(const char* channel, const std::string& message) {
  PyRef sink;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    sink = PyRef::borrow(g_sink);
  }
  if (!sink) return;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyRef r = PyRef::steal(PyObject_CallFunction(sink.get(), "ss", channel, message.c_str()));
  if (!r) PyErr_Clear();
  PyErr_Restore(type, value, tb);
}

void warn_user(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_warned.insert(message).second) return;
  }
  if (!Py_IsInitialized() || !PyGILState_Check()) {
    std::fprintf(stderr, "torchlite warning: %s\n", message.c_str());
    return;
  }
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  // NOTE: a filter turning warnings into errors must not fail the compile: the
  // problem already has its fallback (no disk cache, no dump).
  if (PyErr_WarnEx(PyExc_RuntimeWarning, ("torchlite: " + message).c_str(), 1) < 0) PyErr_Clear();
  PyErr_Restore(type, value, tb);
}

}  // namespace tl
