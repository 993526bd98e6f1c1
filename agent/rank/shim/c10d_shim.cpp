// A small C ABI over PyTorch's own c10d: TCPStore rendezvous, then
// ProcessGroupGloo (or ProcessGroupNCCL when built with USE_C10D_NCCL).
// Every C++ exception is caught here and returned as a message: no exception
// ever crosses into Rust.

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
};

void write_error(char* err, size_t err_len, const std::string& msg) {
  if (err == nullptr || err_len == 0) return;
  size_t n = std::min(msg.size(), err_len - 1);
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// Runs `body`; on an exception writes its message and returns -1.
template <typename F>
int guarded(char* err, size_t err_len, F&& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    write_error(err, err_len, e.what());
  } catch (...) {
    write_error(err, err_len, "unknown C++ exception in c10d");
  }
  return -1;
}

std::vector<at::Tensor> gather(void* const* tensors, size_t n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(*static_cast<at::Tensor*>(tensors[i]));
  }
  return out;
}

}  // namespace

extern "C" {

// Forms the group. `backend` is "gloo" or "nccl"; `bind_host` is the address
// gloo binds on this host ("" = resolve this host's name). Returns NULL and
// fills `err` when the rendezvous or the group creation fails.
void* cohort_pg_new(const char* backend, const char* master_addr, uint16_t master_port,
                    const char* bind_host, int rank, int world_size,
                    int64_t rendezvous_timeout_ms, int64_t collective_timeout_ms,
                    char* err, size_t err_len) {
  Group* group = nullptr;
  int rc = guarded(err, err_len, [&] {
    c10d::TCPStoreOptions opts;
    opts.port = master_port;
    opts.isServer = rank == 0;
    opts.numWorkers = static_cast<size_t>(world_size);
    opts.waitWorkers = true;
    opts.timeout = std::chrono::milliseconds(rendezvous_timeout_ms);
    auto tcp = c10::make_intrusive<c10d::TCPStore>(std::string(master_addr), opts);
    auto store = c10::make_intrusive<c10d::PrefixStore>("default_pg", tcp);
    auto timeout = std::chrono::milliseconds(collective_timeout_ms);
    std::string which(backend);
    auto g = new Group();
    g->store = store;
    if (which == "gloo") {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      std::string host(bind_host);
      options->devices.push_back(
          host.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                       : c10d::ProcessGroupGloo::createDeviceForHostname(host));
      g->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
    } else if (which == "nccl") {
#ifdef USE_C10D_NCCL
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      g->backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
#else
      delete g;
      throw std::runtime_error("this cohort-rank was built without NCCL (cargo feature `nccl`)");
#endif
    } else {
      delete g;
      throw std::runtime_error("unknown c10d backend: " + which);
    }
    group = g;
  });
  return rc == 0 ? group : nullptr;
}

void cohort_pg_free(void* group) { delete static_cast<Group*>(group); }

// In-place sum across ranks. `coalesced` != 0: one allreduce_coalesced call
// for all tensors; else one allreduce per tensor (issued together, then waited).
int cohort_pg_allreduce_sum(void* group, void* const* tensors, size_t n, int coalesced,
                            char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    auto* g = static_cast<Group*>(group);
    auto list = gather(tensors, n);
    if (coalesced) {
      c10d::AllreduceCoalescedOptions opts;
      opts.reduceOp = c10d::ReduceOp::SUM;
      g->backend->allreduce_coalesced(list, opts)->wait();
    } else {
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      for (auto& t : list) {
        std::vector<at::Tensor> one{t};
        c10d::AllreduceOptions opts;
        opts.reduceOp = c10d::ReduceOp::SUM;
        works.push_back(g->backend->allreduce(one, opts));
      }
      for (auto& w : works) w->wait();
    }
  });
}

// Starts an in-place sum of `tensors` (one coalesced collective) and returns
// the pending work, to be finished with cohort_pg_work_wait. NULL on error.
void* cohort_pg_allreduce_start(void* group, void* const* tensors, size_t n, char* err,
                                size_t err_len) {
  c10::intrusive_ptr<c10d::Work>* work = nullptr;
  guarded(err, err_len, [&] {
    auto* g = static_cast<Group*>(group);
    auto list = gather(tensors, n);
    c10d::AllreduceCoalescedOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    work = new c10::intrusive_ptr<c10d::Work>(g->backend->allreduce_coalesced(list, opts));
  });
  return work;
}

// Waits for work started by cohort_pg_allreduce_start and frees it.
int cohort_pg_work_wait(void* work, char* err, size_t err_len) {
  auto* w = static_cast<c10::intrusive_ptr<c10d::Work>*>(work);
  int rc = guarded(err, err_len, [&] { (*w)->wait(); });
  delete w;
  return rc;
}

// Broadcast each tensor in place from `root`.
int cohort_pg_broadcast(void* group, void* const* tensors, size_t n, int root, char* err,
                        size_t err_len) {
  return guarded(err, err_len, [&] {
    auto* g = static_cast<Group*>(group);
    for (size_t i = 0; i < n; ++i) {
      std::vector<at::Tensor> one{*static_cast<at::Tensor*>(tensors[i])};
      c10d::BroadcastOptions opts;
      opts.rootRank = root;
      g->backend->broadcast(one, opts)->wait();
    }
  });
}

int cohort_pg_barrier(void* group, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    auto* g = static_cast<Group*>(group);
    g->backend->barrier(c10d::BarrierOptions())->wait();
  });
}

// Bytes the CUDA caching allocator holds for tensors on `device` now;
// -1 where this build has no CUDA or the device can't say.
int64_t cohort_cuda_allocated_bytes(int device) {
#ifdef USE_C10D_NCCL
  try {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<c10::DeviceIndex>(device));
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
        .current;
  } catch (...) {
    return -1;
  }
#else
  (void)device;
  return -1;
#endif
}

// A timing event recorded on the current stream of CUDA `device` (c10's
// device-generic event, so only libc10 and libc10_cuda are needed); null
// where this build has no CUDA or recording fails.
void* cohort_cuda_event_record(int device) {
#ifdef USE_C10D_NCCL
  try {
    const c10::Device dev(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
    auto* event = new c10::Event(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    event->record(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(dev));
    return event;
  } catch (...) {
    return nullptr;
  }
#else
  (void)device;
  return nullptr;
#endif
}

// Milliseconds from `start` to `end` on the device, waiting for `end` to
// complete; -1 when either is null or the device can't say.
double cohort_cuda_event_elapsed_ms(void* start, void* end) {
#ifdef USE_C10D_NCCL
  if (start == nullptr || end == nullptr) return -1.0;
  try {
    auto* b = static_cast<c10::Event*>(end);
    b->synchronize();
    return static_cast<c10::Event*>(start)->elapsedTime(*b);
  } catch (...) {
    return -1.0;
  }
#else
  (void)start;
  (void)end;
  return -1.0;
#endif
}

void cohort_cuda_event_free(void* event) {
#ifdef USE_C10D_NCCL
  delete static_cast<c10::Event*>(event);
#else
  (void)event;
#endif
}

}  // extern "C"
