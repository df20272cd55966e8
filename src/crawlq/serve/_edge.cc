// crawlq.serve._edge: gRPC's transport in C++ (the system's libgrpc++), every call handed
// to Python as bytes in batches of events.
//
// Why: grpcio spends ~25 us of Python per message of a stream (a completion-queue round
// trip and an asyncio future each), and URLFrontier's GetURLs + ack is three messages a
// URL. Here gRPC's own threads read and write the messages; Python drains what arrived
// (any number of calls' messages) in one call, wakes on one eventfd, and hands the
// answers back as bytes. Nothing of URLFrontier or of crawlq's rules is here: the calls
// are generic (method name, metadata, message bytes), served by the same Python handlers
// grpcio would run (crawlq/serve/grpc_edge.py).
//
// A call's life: gRPC creates its Call (START event), its messages arrive as MESSAGE
// events (reading pauses once WINDOW of them wait unconsumed in Python: read_more()
// resumes it), the client's end of writing is HALF_CLOSE, a client that leaves is CANCEL.
// Python writes answers (queued here, written one after another) and finishes the call
// once; after gRPC's OnDone, DONE; Python then release()s it (only Python deletes a Call,
// so a pointer it looked up stays valid while it uses it).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_callback.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

enum Kind { START = 0, MESSAGE = 1, HALF_CLOSE = 2, CANCEL = 3, DRAINED = 4, DONE = 5 };

constexpr long WINDOW = 4096;  // messages of a call read ahead of Python's consuming them
constexpr size_t HIGH = 256;   // messages waiting to go out from which Python is told (DRAINED)
                               // when they are all out

struct Event {
  uint64_t call;
  int kind;
  std::string data;  // MESSAGE: the bytes; START: the method
  std::vector<std::pair<std::string, std::string>> metadata;  // START
  std::string peer;                                           // START
};

class Edge;

class Call final : public grpc::ServerGenericBidiReactor {
 public:
  Call(Edge* edge, uint64_t id, grpc::GenericCallbackServerContext* ctx);
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // From Python (the GIL held; never concurrently with another of these).
  size_t Write(std::vector<grpc::Slice>&& messages, bool* refused);
  void End(const grpc::Status& status);
  void ReadMore(long n);

 private:
  void NextWrite(std::unique_lock<std::mutex>& lock);  // (releases the lock)

  Edge* edge_;
  uint64_t id_;
  grpc::ByteBuffer in_;
  grpc::ByteBuffer out_;
  std::mutex mu_;
  std::deque<grpc::Slice> queued_;
  bool writing_ = false;
  bool ending_ = false;   // End() was called: no more writes, Finish once they are out
  bool finished_ = false; // Finish() was called
  grpc::Status status_;
  bool want_drain_ = false;
  long unconsumed_ = 0;
  bool paused_ = false;
};

class Edge {
 public:
  Edge() : efd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Edge() {
    if (efd_ >= 0) close(efd_);
  }

  void Push(Event&& e) {
    bool was_empty;
    {
      std::lock_guard<std::mutex> g(qmu_);
      was_empty = queue_.empty();
      queue_.push_back(std::move(e));
    }
    if (was_empty) {
      uint64_t one = 1;
      ssize_t r = write(efd_, &one, sizeof one);
      (void)r;  // (a full counter already says "events")
    }
  }

  std::vector<Event> Drain() {
    uint64_t count;
    ssize_t r = read(efd_, &count, sizeof count);  // (first: a push after this wakes again)
    (void)r;
    std::vector<Event> out;
    std::lock_guard<std::mutex> g(qmu_);
    out.swap(queue_);
    return out;
  }

  Call* Register(grpc::GenericCallbackServerContext* ctx) {
    uint64_t id = next_id_.fetch_add(1);
    Call* call;
    {
      std::lock_guard<std::mutex> g(cmu_);
      call = new Call(this, id, ctx);
      calls_[id] = call;
    }
    return call;
  }

  Call* Find(uint64_t id) {
    std::lock_guard<std::mutex> g(cmu_);
    auto it = calls_.find(id);
    return it == calls_.end() ? nullptr : it->second;
  }

  void Release(uint64_t id) {
    Call* call = nullptr;
    {
      std::lock_guard<std::mutex> g(cmu_);
      auto it = calls_.find(id);
      if (it == calls_.end()) return;
      call = it->second;
      calls_.erase(it);
    }
    delete call;
  }

  std::vector<uint64_t> Live() {
    std::vector<uint64_t> ids;
    std::lock_guard<std::mutex> g(cmu_);
    for (auto& kv : calls_) ids.push_back(kv.first);
    return ids;
  }

  int fd() const { return efd_; }
  std::unique_ptr<grpc::Server> server;

 private:
  int efd_;
  std::mutex qmu_;
  std::vector<Event> queue_;
  std::mutex cmu_;
  std::unordered_map<uint64_t, Call*> calls_;
  std::atomic<uint64_t> next_id_{1};
};

class Service final : public grpc::CallbackGenericService {
 public:
  explicit Service(Edge* edge) : edge_(edge) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* ctx) override {
    return edge_->Register(ctx);
  }

 private:
  Edge* edge_;
};

Call::Call(Edge* edge, uint64_t id, grpc::GenericCallbackServerContext* ctx)
    : edge_(edge), id_(id) {
  Event e{id, START, ctx->method(), {}, ctx->peer()};
  for (const auto& kv : ctx->client_metadata()) {
    e.metadata.emplace_back(std::string(kv.first.data(), kv.first.size()),
                            std::string(kv.second.data(), kv.second.size()));
  }
  edge_->Push(std::move(e));
  StartRead(&in_);
}

void Call::OnReadDone(bool ok) {
  if (!ok) {
    edge_->Push(Event{id_, HALF_CLOSE, {}, {}, {}});
    return;
  }
  grpc::Slice whole;
  std::string data;
  if (in_.DumpToSingleSlice(&whole).ok()) {
    data.assign(reinterpret_cast<const char*>(whole.begin()), whole.size());
  }
  in_.Clear();
  edge_->Push(Event{id_, MESSAGE, std::move(data), {}, {}});
  bool more;
  {
    std::lock_guard<std::mutex> g(mu_);
    more = ++unconsumed_ < WINDOW;
    paused_ = !more;
  }
  if (more) StartRead(&in_);
}

void Call::ReadMore(long n) {
  bool resume;
  {
    std::lock_guard<std::mutex> g(mu_);
    unconsumed_ -= n;
    if (unconsumed_ < 0) unconsumed_ = 0;
    resume = paused_ && unconsumed_ < WINDOW;
    if (resume) paused_ = false;
  }
  if (resume) StartRead(&in_);
}

size_t Call::Write(std::vector<grpc::Slice>&& messages, bool* refused) {
  std::unique_lock<std::mutex> lock(mu_);
  if (ending_) {
    *refused = true;
    return 0;
  }
  *refused = false;
  for (auto& m : messages) queued_.push_back(std::move(m));
  size_t waiting = queued_.size();
  if (waiting >= HIGH) want_drain_ = true;
  if (!writing_) {
    NextWrite(lock);
  }
  return waiting;
}

void Call::NextWrite(std::unique_lock<std::mutex>& lock) {
  // Called with the lock held and no write under way.
  if (!queued_.empty()) {
    grpc::Slice next = std::move(queued_.front());
    queued_.pop_front();
    out_ = grpc::ByteBuffer(&next, 1);
    writing_ = true;
    lock.unlock();
    StartWrite(&out_);
    return;
  }
  writing_ = false;
  bool drained = want_drain_;
  want_drain_ = false;
  bool finish = ending_ && !finished_;
  if (finish) finished_ = true;
  grpc::Status status = status_;
  lock.unlock();
  if (drained && !finish) edge_->Push(Event{id_, DRAINED, {}, {}, {}});
  if (finish) Finish(status);
}

void Call::OnWriteDone(bool ok) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!ok) queued_.clear();  // (the stream is broken: the rest cannot go out)
  NextWrite(lock);
}

void Call::End(const grpc::Status& status) {
  std::unique_lock<std::mutex> lock(mu_);
  if (ending_) return;
  ending_ = true;
  status_ = status;
  if (!writing_) NextWrite(lock);
}

void Call::OnCancel() { edge_->Push(Event{id_, CANCEL, {}, {}, {}}); }

void Call::OnDone() { edge_->Push(Event{id_, DONE, {}, {}, {}}); }

// -- the Python type --------------------------------------------------------------------

struct PyEdge {
  PyObject_HEAD Edge* edge;
  Service* service;
};

int PyEdge_init(PyEdge* self, PyObject*, PyObject*) {
  self->edge = new Edge();
  if (self->edge->fd() < 0) {
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  self->service = new Service(self->edge);
  return 0;
}

void PyEdge_dealloc(PyEdge* self) {
  // A running server is left to the process's end: its shutdown waits on calls only the
  // Python side can finish.
  if (self->edge != nullptr && self->edge->server == nullptr) {
    delete self->service;
    delete self->edge;
  }
  Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}

PyObject* PyEdge_start(PyEdge* self, PyObject* args, PyObject* kwargs) {
  static const char* names[] = {"address", "max_message", "key", "chain", nullptr};
  const char* address;
  int max_message;
  const char* key = nullptr;
  const char* chain = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "si|zz", const_cast<char**>(names),
                                   &address, &max_message, &key, &chain)) {
    return nullptr;
  }
  if (self->edge->server != nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "the edge serves one address, already started");
    return nullptr;
  }
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (key != nullptr && chain != nullptr) {
    grpc::SslServerCredentialsOptions options;
    options.pem_key_cert_pairs.push_back({key, chain});
    credentials = grpc::SslServerCredentials(options);
  } else {
    credentials = grpc::InsecureServerCredentials();
  }
  int port = 0;
  builder.AddListeningPort(address, credentials, &port);
  builder.SetMaxReceiveMessageSize(max_message);
  builder.SetMaxSendMessageSize(max_message);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterCallbackGenericService(self->service);
  std::unique_ptr<grpc::Server> server;
  Py_BEGIN_ALLOW_THREADS server = builder.BuildAndStart();
  Py_END_ALLOW_THREADS if (server == nullptr || port == 0) {
    PyErr_Format(PyExc_OSError, "cannot listen on %s", address);
    return nullptr;
  }
  self->edge->server = std::move(server);
  return PyLong_FromLong(port);
}

PyObject* PyEdge_fileno(PyEdge* self, PyObject*) { return PyLong_FromLong(self->edge->fd()); }

PyObject* bytes_of(const std::string& s) {
  return PyBytes_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
}

PyObject* PyEdge_events(PyEdge* self, PyObject*) {
  std::vector<Event> events = self->edge->Drain();
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(events.size()));
  if (list == nullptr) return nullptr;
  for (size_t i = 0; i < events.size(); ++i) {
    Event& e = events[i];
    PyObject* item;
    if (e.kind == MESSAGE) {
      item = Py_BuildValue("(KiN)", static_cast<unsigned long long>(e.call), e.kind,
                           bytes_of(e.data));
    } else if (e.kind == START) {
      PyObject* md = PyTuple_New(static_cast<Py_ssize_t>(e.metadata.size()));
      if (md == nullptr) {
        Py_DECREF(list);
        return nullptr;
      }
      for (size_t j = 0; j < e.metadata.size(); ++j) {
        const std::string& k = e.metadata[j].first;
        const std::string& v = e.metadata[j].second;
        bool binary = k.size() >= 4 && k.compare(k.size() - 4, 4, "-bin") == 0;
        PyObject* value = binary ? bytes_of(v)
                                 : PyUnicode_DecodeUTF8(v.data(), v.size(), "replace");
        PyTuple_SET_ITEM(md, j, Py_BuildValue("(s#N)", k.data(), (Py_ssize_t)k.size(), value));
      }
      item = Py_BuildValue("(Ki(s#Ns#))", static_cast<unsigned long long>(e.call), e.kind,
                           e.data.data(), (Py_ssize_t)e.data.size(), md, e.peer.data(),
                           (Py_ssize_t)e.peer.size());
    } else {
      item = Py_BuildValue("(KiO)", static_cast<unsigned long long>(e.call), e.kind, Py_None);
    }
    if (item == nullptr) {
      Py_DECREF(list);
      return nullptr;
    }
    PyList_SET_ITEM(list, i, item);
  }
  return list;
}

Call* find(PyEdge* self, unsigned long long id) {
  Call* call = self->edge->Find(id);
  if (call == nullptr) PyErr_Format(PyExc_KeyError, "no call %llu", id);
  return call;
}

PyObject* PyEdge_write(PyEdge* self, PyObject* args) {
  unsigned long long id;
  PyObject* messages;
  if (!PyArg_ParseTuple(args, "KO", &id, &messages)) return nullptr;
  PyObject* seq = PySequence_Fast(messages, "messages: a list of bytes");
  if (seq == nullptr) return nullptr;
  std::vector<grpc::Slice> slices;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  slices.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* m = PySequence_Fast_GET_ITEM(seq, i);
    char* data;
    Py_ssize_t size;
    if (PyBytes_AsStringAndSize(m, &data, &size) < 0) {
      Py_DECREF(seq);
      return nullptr;
    }
    slices.emplace_back(data, static_cast<size_t>(size));
  }
  Py_DECREF(seq);
  Call* call = find(self, id);
  if (call == nullptr) return nullptr;
  bool refused;
  size_t waiting = call->Write(std::move(slices), &refused);
  if (refused) return PyLong_FromLong(-1);
  return PyLong_FromSize_t(waiting);
}

PyObject* PyEdge_finish(PyEdge* self, PyObject* args) {
  unsigned long long id;
  int code;
  const char* details;
  Py_ssize_t size;
  if (!PyArg_ParseTuple(args, "Kis#", &id, &code, &details, &size)) return nullptr;
  Call* call = find(self, id);
  if (call == nullptr) return nullptr;
  call->End(grpc::Status(static_cast<grpc::StatusCode>(code),
                         std::string(details, static_cast<size_t>(size))));
  Py_RETURN_NONE;
}

PyObject* PyEdge_read_more(PyEdge* self, PyObject* args) {
  unsigned long long id;
  long n;
  if (!PyArg_ParseTuple(args, "Kl", &id, &n)) return nullptr;
  Call* call = find(self, id);
  if (call == nullptr) return nullptr;
  call->ReadMore(n);
  Py_RETURN_NONE;
}

PyObject* PyEdge_release(PyEdge* self, PyObject* args) {
  unsigned long long id;
  if (!PyArg_ParseTuple(args, "K", &id)) return nullptr;
  self->edge->Release(id);
  Py_RETURN_NONE;
}

PyObject* PyEdge_live(PyEdge* self, PyObject*) {
  std::vector<uint64_t> ids = self->edge->Live();
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(ids.size()));
  if (list == nullptr) return nullptr;
  for (size_t i = 0; i < ids.size(); ++i) {
    PyList_SET_ITEM(list, i, PyLong_FromUnsignedLongLong(ids[i]));
  }
  return list;
}

PyObject* PyEdge_shutdown(PyEdge* self, PyObject* args) {
  double grace;
  if (!PyArg_ParseTuple(args, "d", &grace)) return nullptr;
  if (self->edge->server == nullptr) Py_RETURN_NONE;
  auto deadline = std::chrono::system_clock::now() +
                  std::chrono::microseconds(static_cast<int64_t>(grace * 1e6));
  Py_BEGIN_ALLOW_THREADS self->edge->server->Shutdown(deadline);
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

PyMethodDef PyEdge_methods[] = {
    {"start", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(PyEdge_start)),
     METH_VARARGS | METH_KEYWORDS,
     "start(address, max_message, key=None, chain=None) -> port: listen and serve"},
    {"fileno", reinterpret_cast<PyCFunction>(PyEdge_fileno), METH_NOARGS,
     "the eventfd that is readable while events wait"},
    {"events", reinterpret_cast<PyCFunction>(PyEdge_events), METH_NOARGS,
     "the events that arrived: (call, kind, payload) tuples"},
    {"write", reinterpret_cast<PyCFunction>(PyEdge_write), METH_VARARGS,
     "write(call, [bytes]) -> messages waiting to go out (-1: the call is ending)"},
    {"finish", reinterpret_cast<PyCFunction>(PyEdge_finish), METH_VARARGS,
     "finish(call, code, details): end the call once its messages are out"},
    {"read_more", reinterpret_cast<PyCFunction>(PyEdge_read_more), METH_VARARGS,
     "read_more(call, n): n messages were consumed"},
    {"release", reinterpret_cast<PyCFunction>(PyEdge_release), METH_VARARGS,
     "release(call): forget a call after its DONE event"},
    {"live", reinterpret_cast<PyCFunction>(PyEdge_live), METH_NOARGS,
     "the calls not released yet"},
    {"shutdown", reinterpret_cast<PyCFunction>(PyEdge_shutdown), METH_VARARGS,
     "shutdown(grace): stop taking calls, cancel those left after grace seconds, wait "
     "for them to be finished"},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject PyEdgeType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "crawlq.serve._edge",
                      "gRPC's transport in C++ for crawlq serve (see grpc_edge.py)", -1,
                      nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__edge(void) {
  PyEdgeType.tp_name = "crawlq.serve._edge.Edge";
  PyEdgeType.tp_basicsize = sizeof(PyEdge);
  PyEdgeType.tp_flags = Py_TPFLAGS_DEFAULT;
  PyEdgeType.tp_doc = "A gRPC server whose calls reach Python as batches of events.";
  PyEdgeType.tp_new = PyType_GenericNew;
  PyEdgeType.tp_init = reinterpret_cast<initproc>(PyEdge_init);
  PyEdgeType.tp_dealloc = reinterpret_cast<destructor>(PyEdge_dealloc);
  PyEdgeType.tp_methods = PyEdge_methods;
  if (PyType_Ready(&PyEdgeType) < 0) return nullptr;
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  Py_INCREF(&PyEdgeType);
  if (PyModule_AddObject(m, "Edge", reinterpret_cast<PyObject*>(&PyEdgeType)) < 0) {
    Py_DECREF(&PyEdgeType);
    Py_DECREF(m);
    return nullptr;
  }
  for (auto kv : {std::make_pair("START", START), std::make_pair("MESSAGE", MESSAGE),
                  std::make_pair("HALF_CLOSE", HALF_CLOSE), std::make_pair("CANCEL", CANCEL),
                  std::make_pair("DRAINED", DRAINED), std::make_pair("DONE", DONE)}) {
    PyModule_AddIntConstant(m, kv.first, kv.second);
  }
  PyModule_AddIntConstant(m, "WINDOW", WINDOW);
  PyModule_AddIntConstant(m, "HIGH", static_cast<long>(HIGH));
  return m;
}
