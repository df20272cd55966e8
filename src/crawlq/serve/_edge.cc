// crawlq.serve._edge: gRPC's transport in C++ (the system's libgrpc++), every call handed
// to Python as bytes in batches of events.
//
// Why: grpcio spends ~25 us of Python per message of a stream (a completion-queue round
// trip and an asyncio future each), and URLFrontier's GetURLs + ack is three messages a
// URL. Here one thread of gRPC's asynchronous API (a completion queue it polls itself:
// no hand-off between threads per message; gRPC's callback API measured 34 against 15 us
// of server CPU per message read and answered) reads and writes every call's messages;
// Python drains what arrived (any number of calls' messages) in one call, woken by one
// eventfd, and hands its answers back as commands that the thread takes in batches.
// Nothing of URLFrontier or of crawlq's rules is here: the calls are generic (method
// name, metadata, message bytes), served by the same Python handlers grpcio would run
// (crawlq/serve/grpc_edge.py).
//
// A call's life: START event (method, metadata, peer), its messages as MESSAGE events
// (reading pauses once WINDOW of them wait unconsumed in Python: a read_more command
// resumes it), the client's end of writing as HALF_CLOSE, a client that left as CANCEL.
// Python's write commands queue answers (written one after another), its finish command
// ends the call once they are out. When every operation of the call is over the thread
// deletes it: DONE. Only the thread touches gRPC and the calls; Python's commands carry
// call ids (one for a call already gone is ignored).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <grpcpp/alarm.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

enum Kind { START = 0, MESSAGE = 1, HALF_CLOSE = 2, CANCEL = 3, DRAINED = 4, DONE = 5 };

constexpr long WINDOW = 4096;  // messages of a call read ahead of Python's consuming them
constexpr long WINDOW_BYTES = 8 << 20;  // and their bytes: a call's reading pauses at either
// A message with more queued behind it is written with gRPC's buffer hint (it may wait
// for them: one sendmsg for many small messages instead of one each, the kernel's TCP
// path being most of this thread's CPU), up to HINT_BYTES (with gRPC's 5-byte prefix of
// each) between flushes: below the HTTP/2 transport's write buffer (65535 bytes by
// default), under which gRPC completes a hinted write at once; the budget bounds how
// long data is held back. The last message queued always goes unhinted, and flushes
// those before it. Never on a call's first message, which carries its initial metadata
// (hinted, it never completes: gRPC issue 12975).
constexpr size_t HINT_BYTES = 16 << 10;
constexpr size_t PREFIX_BYTES = 5;  // (gRPC's length prefix of a message)

struct Event {
  uint64_t call;
  int kind;
  std::string data;  // MESSAGE: the bytes; START: the method
  std::vector<std::pair<std::string, std::string>> metadata;  // START
  std::string peer;                                           // START
};

enum Op { WRITE = 0, FINISH = 1, READ_MORE = 2 };

struct Command {
  uint64_t call;
  int op;
  std::vector<grpc::Slice> messages;  // WRITE
  bool tell_drained = false;          // WRITE: a DRAINED event once all are out
  int code = 0;                       // FINISH
  std::string details;                // FINISH
  long n = 0;                         // READ_MORE: messages consumed
  long bytes = 0;                     // READ_MORE: their bytes
};

class Edge;

enum TagKind { T_NEW, T_READ, T_WRITE, T_FINISH, T_DONE };

class Call;

struct Tag {
  Call* call;
  TagKind kind;
};

// One call, touched only by the edge's thread.
class Call {
 public:
  Call(Edge* edge, uint64_t id);
  void Proceed(TagKind kind, bool ok);
  void Write(std::vector<grpc::Slice>&& messages, bool tell_drained);
  void End(grpc::Status status);
  void ReadMore(long n, long bytes);

 private:
  void StartRead();
  void Pump();
  void MaybeDelete();

  Edge* edge_;
  uint64_t id_;
  grpc::GenericServerContext ctx_;
  grpc::GenericServerAsyncReaderWriter stream_{&ctx_};
  grpc::ByteBuffer in_, out_;
  std::deque<grpc::Slice> queued_;
  Tag t_new_{this, T_NEW}, t_read_{this, T_READ}, t_write_{this, T_WRITE},
      t_finish_{this, T_FINISH}, t_done_{this, T_DONE};
  bool reading_ = false, writing_ = false;
  bool read_ended_ = false;
  bool ending_ = false, finishing_ = false, finished_ = false, done_ = false;
  bool tell_drained_ = false;
  bool paused_ = false;
  bool wrote_ = false;  // (a message went out: the initial metadata with it)
  size_t hinted_ = 0;   // bytes written with the buffer hint since the last flush
  long unconsumed_ = 0;
  long unconsumed_bytes_ = 0;
  grpc::Status status_;
};

class Edge {
 public:
  Edge() : efd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Edge() {
    if (efd_ >= 0) close(efd_);
  }

  // -- events, from the thread to Python
  void Push(Event&& e) {
    bool was_empty;
    {
      std::lock_guard<std::mutex> g(qmu_);
      was_empty = events_.empty();
      events_.push_back(std::move(e));
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
    out.swap(events_);
    return out;
  }

  // -- commands, from Python to the thread
  void Send(Command&& command) {
    // (the alarm is set under the lock: Shutdown shuts the queue under it, and an alarm
    // set on a queue shut down would abort the process)
    std::lock_guard<std::mutex> g(cmu_);
    if (stopped_) return;  // (the calls are gone with the server)
    commands_.push_back(std::move(command));
    if (!alarm_set_) {
      alarm_set_ = true;
      alarm_.Set(cq_.get(), gpr_now(GPR_CLOCK_MONOTONIC), &alarm_);
    }
  }

  // -- the thread
  void Run() {
    new Call(this, next_id_++);
    void* tag;
    bool ok;
    while (cq_->Next(&tag, &ok)) {
      if (tag == &alarm_) {
        std::vector<Command> commands;
        {
          std::lock_guard<std::mutex> g(cmu_);
          alarm_set_ = false;
          commands.swap(commands_);
        }
        for (auto& c : commands) Apply(c);
        continue;
      }
      Tag* t = static_cast<Tag*>(tag);
      t->call->Proceed(t->kind, ok);
    }
  }

  void Apply(Command& c) {
    auto it = calls_.find(c.call);
    if (it == calls_.end()) return;  // (gone: a client that left, a call finished)
    Call* call = it->second;
    switch (c.op) {
      case WRITE:
        call->Write(std::move(c.messages), c.tell_drained);
        break;
      case FINISH:
        call->End(grpc::Status(static_cast<grpc::StatusCode>(c.code), c.details));
        break;
      case READ_MORE:
        call->ReadMore(c.n, c.bytes);
        break;
    }
  }

  bool Start(const std::string& address, int max_message, const char* key, const char* chain,
             int* port) {
    grpc::ServerBuilder builder;
    std::shared_ptr<grpc::ServerCredentials> credentials;
    if (key != nullptr && chain != nullptr) {
      grpc::SslServerCredentialsOptions options;
      options.pem_key_cert_pairs.push_back({key, chain});
      credentials = grpc::SslServerCredentials(options);
    } else {
      credentials = grpc::InsecureServerCredentials();
    }
    builder.AddListeningPort(address, credentials, port);
    builder.SetMaxReceiveMessageSize(max_message);
    builder.SetMaxSendMessageSize(max_message);
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.RegisterAsyncGenericService(&service_);
    cq_ = builder.AddCompletionQueue();
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || *port == 0) {
      server_.reset();
      cq_->Shutdown();
      void* tag;
      bool ok;
      while (cq_->Next(&tag, &ok)) {
      }
      cq_.reset();
      return false;
    }
    thread_ = std::thread([this] { Run(); });
    return true;
  }

  // Stop taking calls; those under way have ``grace`` seconds to end (Python's commands
  // still reach them meanwhile), then are cancelled. Once only.
  void Shutdown(double grace) {
    {
      std::lock_guard<std::mutex> g(cmu_);
      if (server_ == nullptr || shutting_down_) return;
      shutting_down_ = true;
    }
    auto deadline = std::chrono::system_clock::now() +
                    std::chrono::microseconds(static_cast<int64_t>(grace * 1e6));
    server_->Shutdown(deadline);
    {
      std::lock_guard<std::mutex> g(cmu_);
      stopped_ = true;
      cq_->Shutdown();
    }
    thread_.join();
  }

  bool started() const { return server_ != nullptr; }
  int fd() const { return efd_; }

  grpc::AsyncGenericService service_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::unordered_map<uint64_t, Call*> calls_;  // (the thread's own)
  uint64_t next_id_ = 1;                        // (the thread's own)

 private:
  int efd_;
  std::mutex qmu_;
  std::vector<Event> events_;
  std::mutex cmu_;
  std::vector<Command> commands_;
  bool alarm_set_ = false;
  bool shutting_down_ = false;
  bool stopped_ = false;
  grpc::Alarm alarm_;
  std::unique_ptr<grpc::Server> server_;
  std::thread thread_;
};

Call::Call(Edge* edge, uint64_t id) : edge_(edge), id_(id) {
  ctx_.AsyncNotifyWhenDone(&t_done_);
  edge_->service_.RequestCall(&ctx_, &stream_, edge_->cq_.get(), edge_->cq_.get(), &t_new_);
}

void Call::StartRead() {
  reading_ = true;
  stream_.Read(&in_, &t_read_);
}

void Call::Proceed(TagKind kind, bool ok) {
  switch (kind) {
    case T_NEW: {
      if (!ok) {  // (the server is shutting down: no call came)
        done_ = true;  // (the done tag is not delivered for a call never started)
        delete this;
        return;
      }
      new Call(edge_, edge_->next_id_++);  // (the next call's slot)
      edge_->calls_[id_] = this;
      Event e{id_, START, ctx_.method(), {}, ctx_.peer()};
      for (const auto& kv : ctx_.client_metadata()) {
        e.metadata.emplace_back(std::string(kv.first.data(), kv.first.size()),
                                std::string(kv.second.data(), kv.second.size()));
      }
      edge_->Push(std::move(e));
      StartRead();
      return;
    }
    case T_READ: {
      reading_ = false;
      if (!ok) {
        read_ended_ = true;
        edge_->Push(Event{id_, HALF_CLOSE, {}, {}, {}});
        MaybeDelete();
        return;
      }
      grpc::Slice whole;
      std::string data;
      if (in_.DumpToSingleSlice(&whole).ok()) {
        data.assign(reinterpret_cast<const char*>(whole.begin()), whole.size());
      }
      in_.Clear();
      unconsumed_bytes_ += static_cast<long>(data.size());
      edge_->Push(Event{id_, MESSAGE, std::move(data), {}, {}});
      if (finishing_ || done_) {
        MaybeDelete();
      } else if (++unconsumed_ < WINDOW && unconsumed_bytes_ < WINDOW_BYTES) {
        StartRead();
      } else {
        paused_ = true;
      }
      return;
    }
    case T_WRITE:
      writing_ = false;
      if (!ok) queued_.clear();  // (the stream is broken: the rest cannot go out)
      Pump();
      return;
    case T_FINISH:
      finished_ = true;
      MaybeDelete();
      return;
    case T_DONE:
      done_ = true;
      if (ctx_.IsCancelled() && !finished_) {
        queued_.clear();
        edge_->Push(Event{id_, CANCEL, {}, {}, {}});
      }
      MaybeDelete();
      return;
  }
}

void Call::Write(std::vector<grpc::Slice>&& messages, bool tell_drained) {
  if (ending_) return;
  for (auto& m : messages) queued_.push_back(std::move(m));
  tell_drained_ = tell_drained_ || tell_drained;
  Pump();
}

void Call::Pump() {
  if (writing_) return;
  if (done_) {  // (cancelled: no operation may start any more; nothing is to be sent)
    queued_.clear();
    if (ending_ && !finishing_) finishing_ = finished_ = true;
    MaybeDelete();
    return;
  }
  if (!queued_.empty()) {
    grpc::Slice next = std::move(queued_.front());
    queued_.pop_front();
    grpc::WriteOptions options;
    size_t bytes = next.size() + PREFIX_BYTES;
    if (wrote_ && !queued_.empty() && hinted_ + bytes < HINT_BYTES) {
      options.set_buffer_hint();  // (the next message follows at once: see HINT_BYTES)
      hinted_ += bytes;
    } else {
      hinted_ = 0;
    }
    wrote_ = true;
    out_ = grpc::ByteBuffer(&next, 1);
    writing_ = true;
    stream_.Write(out_, options, &t_write_);
    return;
  }
  if (tell_drained_ && !ending_) {
    tell_drained_ = false;
    edge_->Push(Event{id_, DRAINED, {}, {}, {}});
  }
  if (ending_ && !finishing_) {
    finishing_ = true;
    stream_.Finish(status_, &t_finish_);
    return;
  }
  MaybeDelete();
}

void Call::End(grpc::Status status) {
  if (ending_) return;
  ending_ = true;
  status_ = std::move(status);
  Pump();
}

void Call::ReadMore(long n, long bytes) {
  unconsumed_ -= n;
  unconsumed_bytes_ -= bytes;
  if (unconsumed_ < 0) unconsumed_ = 0;
  if (unconsumed_bytes_ < 0) unconsumed_bytes_ = 0;
  if (paused_ && unconsumed_ < WINDOW && unconsumed_bytes_ < WINDOW_BYTES && !finishing_ &&
      !done_) {
    paused_ = false;
    StartRead();
  }
}

void Call::MaybeDelete() {
  // Every operation of the call over: its read, its write, its finish (or a cancel that
  // ends it without one), and gRPC's word that the call is done.
  bool ended = finished_ || (done_ && ctx_.IsCancelled());
  if (!done_ || reading_ || writing_ || !ended || (finishing_ && !finished_)) return;
  edge_->calls_.erase(id_);
  edge_->Push(Event{id_, DONE, {}, {}, {}});
  delete this;
}

// -- the Python type --------------------------------------------------------------------

struct PyEdge {
  PyObject_HEAD Edge* edge;
};

PyObject* PyEdge_new(PyTypeObject* type, PyObject*, PyObject*) {
  PyEdge* self = reinterpret_cast<PyEdge*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->edge = new Edge();
  if (self->edge->fd() < 0) {
    PyErr_SetFromErrno(PyExc_OSError);
    Py_DECREF(self);
    return nullptr;
  }
  return reinterpret_cast<PyObject*>(self);
}

void PyEdge_dealloc(PyEdge* self) {
  // A running server is left to the process's end (its thread holds the Edge).
  if (self->edge != nullptr && !self->edge->started()) delete self->edge;
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
  if (self->edge->started()) {
    PyErr_SetString(PyExc_RuntimeError, "an edge serves one address once");
    return nullptr;
  }
  int port = 0;
  bool ok;
  Py_BEGIN_ALLOW_THREADS ok = self->edge->Start(address, max_message, key, chain, &port);
  Py_END_ALLOW_THREADS if (!ok) {
    PyErr_Format(PyExc_OSError, "cannot listen on %s", address);
    return nullptr;
  }
  return PyLong_FromLong(port);
}

PyObject* PyEdge_fileno(PyEdge* self, PyObject*) { return PyLong_FromLong(self->edge->fd()); }

PyObject* bytes_of(const std::string& s) {
  return PyBytes_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
}

PyObject* text_of(const std::string& s) {
  return PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
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
        PyObject* value = binary ? bytes_of(v) : text_of(v);
        PyTuple_SET_ITEM(md, j, Py_BuildValue("(NN)", text_of(k), value));
      }
      // (a client's bytes, never trusted to be UTF-8: a method name that is not
      // matches no handler: UNIMPLEMENTED)
      item = Py_BuildValue("(Ki(NNN))", static_cast<unsigned long long>(e.call), e.kind,
                           text_of(e.data), md, text_of(e.peer));
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

PyObject* PyEdge_write(PyEdge* self, PyObject* args) {
  unsigned long long id;
  PyObject* messages;
  int tell_drained = 0;
  if (!PyArg_ParseTuple(args, "KO|p", &id, &messages, &tell_drained)) return nullptr;
  PyObject* seq = PySequence_Fast(messages, "messages: a list of bytes");
  if (seq == nullptr) return nullptr;
  Command c{id, WRITE};
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  c.messages.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    char* data;
    Py_ssize_t size;
    if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(seq, i), &data, &size) < 0) {
      Py_DECREF(seq);
      return nullptr;
    }
    c.messages.emplace_back(data, static_cast<size_t>(size));
  }
  Py_DECREF(seq);
  c.tell_drained = tell_drained != 0;
  self->edge->Send(std::move(c));
  Py_RETURN_NONE;
}

PyObject* PyEdge_finish(PyEdge* self, PyObject* args) {
  unsigned long long id;
  int code;
  const char* details;
  Py_ssize_t size;
  if (!PyArg_ParseTuple(args, "Kis#", &id, &code, &details, &size)) return nullptr;
  Command c{id, FINISH};
  c.code = code;
  c.details.assign(details, static_cast<size_t>(size));
  self->edge->Send(std::move(c));
  Py_RETURN_NONE;
}

PyObject* PyEdge_read_more(PyEdge* self, PyObject* args) {
  unsigned long long id;
  long n, bytes;
  if (!PyArg_ParseTuple(args, "Kll", &id, &n, &bytes)) return nullptr;
  Command c{id, READ_MORE};
  c.n = n;
  c.bytes = bytes;
  self->edge->Send(std::move(c));
  Py_RETURN_NONE;
}

PyObject* PyEdge_shutdown(PyEdge* self, PyObject* args) {
  double grace;
  if (!PyArg_ParseTuple(args, "d", &grace)) return nullptr;
  Py_BEGIN_ALLOW_THREADS self->edge->Shutdown(grace);
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
     "write(call, [bytes], tell_drained=False): queue messages; tell_drained: a DRAINED "
     "event once all are out"},
    {"finish", reinterpret_cast<PyCFunction>(PyEdge_finish), METH_VARARGS,
     "finish(call, code, details): end the call once its messages are out"},
    {"read_more", reinterpret_cast<PyCFunction>(PyEdge_read_more), METH_VARARGS,
     "read_more(call, n, nbytes): n messages of nbytes in all were consumed"},
    {"shutdown", reinterpret_cast<PyCFunction>(PyEdge_shutdown), METH_VARARGS,
     "shutdown(grace): stop taking calls, cancel those left after grace seconds, stop"},
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
  PyEdgeType.tp_new = PyEdge_new;
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
  return m;
}
