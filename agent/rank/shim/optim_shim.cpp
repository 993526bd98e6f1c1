// Adam as PyTorch's own fused kernel (the `fused=True` path of torch.optim.Adam),
// one pass over each parameter instead of a chain of element-wise ops and
// temporaries. Every C++ exception is caught and returned as a message.

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

void write_error(char* err, size_t err_len, const std::string& msg) {
  if (err == nullptr || err_len == 0) return;
  size_t n = std::min(msg.size(), err_len - 1);
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

std::vector<at::Tensor> gather(void* const* tensors, size_t n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(*static_cast<at::Tensor*>(tensors[i]));
  return out;
}

}  // namespace

extern "C" {

// One Adam update of `n` parameters in place from their gradients; `step` is
// the update's number (from 1, for the bias correction). Returns 0, or -1
// with `err` filled.
int cohort_fused_adam(void* const* params, void* const* grads, void* const* exp_avgs,
                      void* const* exp_avg_sqs, size_t n, double step, double lr, double beta1,
                      double beta2, double eps, char* err, size_t err_len) {
  try {
    auto p = gather(params, n);
    auto g = gather(grads, n);
    auto m = gather(exp_avgs, n);
    auto v = gather(exp_avg_sqs, n);
    std::vector<at::Tensor> steps;
    steps.reserve(n);
    for (auto& t : p) steps.push_back(at::full({}, step, t.options().dtype(at::kFloat)));
    c10::NoGradGuard no_grad;
    at::_fused_adam_(p, g, m, v, {}, steps, lr, beta1, beta2, /*weight_decay=*/0.0, eps,
                     /*amsgrad=*/false, /*maximize=*/false);
    return 0;
  } catch (const std::exception& e) {
    write_error(err, err_len, e.what());
  } catch (...) {
    write_error(err, err_len, "unknown C++ exception in the fused Adam");
  }
  return -1;
}

}  // extern "C"
