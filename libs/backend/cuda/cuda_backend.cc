// The CUDA backend (cuda_backend.h): memory, streams, staging and the op dispatch to the
// kernels of kernels.h and to cuBLAS.
#include "colibri/backend/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/core/units.h"
#include "colibri/quant/dtype.h"
#include "kernels.h"

namespace colibri::backend {
namespace {

using quant::DType;

std::string CudaText(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

absl::Status CudaStatus(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();  // clears the error when it is not sticky
  const std::string msg = absl::StrCat("CUDA ", std::string(what), ": ", CudaText(e));
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
    return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

// Host -> device copies from pageable memory through two pinned buffers on a stream of its own:
// the host copy into one buffer overlaps the DMA out of the other. Copy() returns once the
// source has been consumed (the DMA may still run; it is ordered on `stream`).
class PinnedStager {
 public:
  static constexpr size_t kChunk = 8u << 20;

  ~PinnedStager() {
    for (int i = 0; i < 2; ++i) {
      if (events_[i] != nullptr) (void)cudaEventDestroy(events_[i]);
      if (buffers_[i] != nullptr) (void)cudaFreeHost(buffers_[i]);
    }
    if (own_stream_ && stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  // `stream`: the stream to copy on; nullptr: a new stream owned by the stager.
  absl::Status Init(cudaStream_t stream) {
    if (stream == nullptr) {
      if (auto st = CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                               "stream create");
          !st.ok()) {
        return st;
      }
      own_stream_ = true;
    } else {
      stream_ = stream;
    }
    for (int i = 0; i < 2; ++i) {
      if (auto st = CudaStatus(cudaHostAlloc(&buffers_[i], kChunk, cudaHostAllocDefault),
                               "pinned staging alloc");
          !st.ok()) {
        return st;
      }
      if (auto st = CudaStatus(cudaEventCreateWithFlags(&events_[i], cudaEventDisableTiming),
                               "event create");
          !st.ok()) {
        return st;
      }
    }
    return absl::OkStatus();
  }

  cudaStream_t stream() const { return stream_; }

  cudaError_t Copy(void* dst, const void* src, size_t bytes) {
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    for (size_t off = 0; off < bytes; off += kChunk) {
      const size_t len = std::min(kChunk, bytes - off);
      const int b = next_;
      next_ ^= 1;
      if (cudaError_t e = cudaEventSynchronize(events_[b]); e != cudaSuccess) return e;
      std::memcpy(buffers_[b], s + off, len);
      if (cudaError_t e =
              cudaMemcpyAsync(d + off, buffers_[b], len, cudaMemcpyHostToDevice, stream_);
          e != cudaSuccess) {
        return e;
      }
      if (cudaError_t e = cudaEventRecord(events_[b], stream_); e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }

 private:
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  void* buffers_[2] = {nullptr, nullptr};
  cudaEvent_t events_[2] = {nullptr, nullptr};
  int next_ = 0;
};

class CudaFence final : public Fence {
 public:
  CudaFence(int device, cudaEvent_t event, absl::Status status)
      : device_(device), event_(event), status_(std::move(status)) {}
  ~CudaFence() override {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }
  absl::Status Wait() override {
    if (!status_.ok()) return status_;
    (void)cudaSetDevice(device_);
    return CudaStatus(cudaEventSynchronize(event_), "fence wait");
  }

 private:
  int device_;
  cudaEvent_t event_;
  absl::Status status_;
};

class CudaBackend;

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(CudaBackend* backend, void* data, size_t size)
      : backend_(backend), data_(data), size_(size) {}
  ~CudaBuffer() override;
  void* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  CudaBackend* backend_;
  void* data_;
  size_t size_;
};

// Device memory that only grows, reused in stream order.
struct Scratch {
  void* ptr = nullptr;
  size_t size = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options)
      : options_(options), device_(options.device) {}

  ~CudaBackend() override {
    (void)cudaSetDevice(device_);
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    for (Scratch* s : {&act_, &x16_, &w16_}) {
      if (s->ptr != nullptr) (void)cudaFreeAsync(s->ptr, stream_);
    }
    if (codebooks_storage_ != nullptr) (void)cudaFree(codebooks_storage_);
    if (ring_host_ != nullptr) (void)cudaFreeHost(ring_host_);
    if (ring_device_ != nullptr) (void)cudaFree(ring_device_);
    if (import_done_ != nullptr) (void)cudaEventDestroy(import_done_);
    if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
    import_stager_.reset();
    transfer_stagers_.clear();
    if (stream_ != nullptr) {
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
    }
    if (import_stream_ != nullptr) (void)cudaStreamDestroy(import_stream_);
  }

  absl::Status Init() {
    if (auto st = CudaStatus(cudaSetDevice(device_), absl::StrCat("set device ", device_));
        !st.ok())
      return st;
    cudaDeviceProp prop{};
    if (auto st = CudaStatus(cudaGetDeviceProperties(&prop, device_), "device properties");
        !st.ok())
      return st;
    device_name_ = prop.name;
    auto init = [](cudaError_t e, std::string_view what) { return CudaStatus(e, what); };
    if (auto st = init(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream create");
        !st.ok())
      return st;
    if (auto st = init(cudaStreamCreateWithFlags(&import_stream_, cudaStreamNonBlocking),
                       "stream create");
        !st.ok()) {
      return st;
    }
    if (auto st =
            init(cudaEventCreateWithFlags(&import_done_, cudaEventDisableTiming), "event create");
        !st.ok()) {
      return st;
    }
    // Freed blocks stay in the device's pool: per-expert imports reuse them without going back
    // to the driver.
    cudaMemPool_t pool;
    if (auto st = init(cudaDeviceGetDefaultMemPool(&pool, device_), "memory pool"); !st.ok())
      return st;
    uint64_t keep = std::numeric_limits<uint64_t>::max();
    if (auto st = init(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                       "memory pool");
        !st.ok()) {
      return st;
    }
    if (cublasStatus_t s = cublasCreate(&cublas_); s != CUBLAS_STATUS_SUCCESS) {
      cublas_ = nullptr;
      return absl::InternalError(absl::StrCat("cuBLAS create: ", cublasGetStatusString(s)));
    }
    if (cublasStatus_t s = cublasSetStream(cublas_, stream_); s != CUBLAS_STATUS_SUCCESS) {
      return absl::InternalError(absl::StrCat("cuBLAS set stream: ", cublasGetStatusString(s)));
    }
    if (auto st = init(cuda::UploadCodebooks(&codebooks_storage_, &books_), "codebook upload");
        !st.ok())
      return st;
    import_stager_ = std::make_unique<PinnedStager>();
    if (auto st = import_stager_->Init(import_stream_); !st.ok()) return st;
    return GrowRing(kRingBytes);
  }

  std::string_view name() const override { return "cuda"; }
  absl::Status SupportsOp(const OpSpec& spec) const override {
    if (spec.op == Op::kAttention && spec.head_dim > cuda::kMaxHeadDim) {
      return absl::UnimplementedError(
          absl::StrCat("backend 'cuda' does not support op Attention with head_dim ", spec.head_dim,
                       " (its kernel goes to ", cuda::kMaxHeadDim, ")"));
    }
    const bool weighted =
        spec.op == Op::kGetRows || spec.op == Op::kMatMul || spec.op == Op::kApplyExperts;
    // Weights of every type the matrix-vector kernels take; Q8_1 is an activation format only.
    if (weighted && (spec.dtype == DType::kQ8_1 || quant::Traits(spec.dtype).block_bytes == 0)) {
      return absl::UnimplementedError(
          absl::StrCat("backend 'cuda' does not support op ", std::string(OpName(spec.op)),
                       " with ", std::string(quant::DTypeName(spec.dtype)), " weights"));
    }
    return absl::OkStatus();
  }

  // Memory ------------------------------------------------------------------------------------
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override {
    void* p = nullptr;
    const size_t n = std::max<size_t>(bytes, 1);
    if (cudaError_t e = cudaMallocAsync(&p, n, stream_); e != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::Status(
          e == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted
                                         : absl::StatusCode::kInternal,
          absl::StrCat("CUDA device ", device_, " (", device_name_, "): cannot allocate ",
                       FormatSize(bytes), ": ", CudaText(e), FreeText()));
    }
    Record(cudaMemsetAsync(p, 0, n, stream_), "memset");
    return std::unique_ptr<Buffer>(new CudaBuffer(this, p, bytes));
  }

  void Free(void* p) {
    (void)cudaSetDevice(device_);
    Record(cudaFreeAsync(p, stream_), "free");
  }

  void Upload(void* dst, const void* src, size_t bytes) override {
    if (failed() || bytes == 0) return;
    Record(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
    Record(cudaStreamSynchronize(stream_), "upload");
  }
  void Download(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    if (failed()) {
      std::memset(dst, 0, bytes);
      return;
    }
    Record(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download");
    Record(cudaStreamSynchronize(stream_), "download");
    if (failed()) std::memset(dst, 0, bytes);
  }
  void Copy(void* dst, const void* src, size_t bytes) override {
    if (failed() || bytes == 0) return;
    Record(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "copy");
  }
  void Zero(void* dst, size_t bytes) override {
    if (failed() || bytes == 0) return;
    Record(cudaMemsetAsync(dst, 0, bytes, stream_), "memset");
  }
  bool zero_copy() const override { return false; }

  absl::StatusOr<WeightRef> ImportWeight(DType dtype, int64_t rows, int64_t cols,
                                         const void* host_data,
                                         std::unique_ptr<Buffer>* storage) override {
    auto row_bytes = quant::CheckedRowBytes(dtype, cols);
    if (!row_bytes.ok()) return row_bytes.status();
    const size_t bytes = *row_bytes * static_cast<size_t>(rows);
    if (auto st = status(); !st.ok()) return st;
    void* p = nullptr;
    // Allocated on the import stream so the copy need not wait for queued ops; the compute
    // stream waits for the copy; the buffer is freed on the compute stream after its last use.
    if (cudaError_t e = cudaMallocAsync(&p, std::max<size_t>(bytes, 1), import_stream_);
        e != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::Status(
          e == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted
                                         : absl::StatusCode::kInternal,
          absl::StrCat("CUDA device ", device_, ": cannot allocate ", FormatSize(bytes), " for a ",
                       std::string(quant::DTypeName(dtype)), " weight [", rows, ", ", cols,
                       "]: ", CudaText(e), FreeText()));
    }
    auto buffer = std::make_unique<CudaBuffer>(this, p, bytes);
    absl::Status st = CudaStatus(import_stager_->Copy(p, host_data, bytes), "weight upload");
    if (st.ok()) st = CudaStatus(cudaEventRecord(import_done_, import_stream_), "weight upload");
    if (st.ok()) st = CudaStatus(cudaStreamWaitEvent(stream_, import_done_, 0), "weight upload");
    if (!st.ok()) {
      (void)cudaStreamSynchronize(import_stream_);
      return st;
    }
    *storage = std::move(buffer);
    return WeightRef{dtype, rows, cols, p};
  }

  // Ops ---------------------------------------------------------------------------------------
  void GetRows(const WeightRef& table, const int32_t* ids, int64_t n, float* out) override {
    if (failed() || n <= 0) return;
    const auto* d_ids = Stage(ids, n);
    if (d_ids == nullptr) return;
    Record(cuda::GetRows(table.dtype, table.data, table.cols, d_ids, n, out, books_, stream_),
           "get rows");
  }

  void MatMul(const WeightRef& w, const float* x, int64_t n, float* y, bool accumulate) override {
    if (failed() || n <= 0 || w.rows <= 0) return;
    if (n >= options_.gemm_min_rows) {
      Gemm(w, x, n, y, accumulate);
      return;
    }
    const DType act_type = quant::Traits(w.dtype).vec_dot_type;
    const void* act = x;
    if (act_type != DType::kF32) {
      void* a = Ensure(&act_, quant::RowBytes(act_type, w.cols) * static_cast<size_t>(n));
      if (a == nullptr) return;
      Record(cuda::QuantizeActivations(act_type, x, n, w.cols, a, stream_), "quantize activations");
      act = a;
    }
    Record(cuda::MatVec(w.dtype, w.data, w.rows, w.cols, act, n, y, accumulate, books_, stream_),
           "matvec");
  }

  void AddBias(float* x, const float* bias, int64_t n, int64_t dim) override {
    if (failed()) return;
    Record(cuda::AddBias(x, bias, n, dim, stream_), "add bias");
  }
  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* y) override {
    if (failed()) return;
    Record(cuda::RmsNorm(x, weight, n, dim, eps, y, stream_), "rms norm");
  }
  void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const RopeParams& p) override {
    if (failed() || n <= 0 || p.n_rot <= 0) return;
    const auto* d_pos = Stage(positions, n);
    if (d_pos == nullptr) return;
    const auto* d_freq = Stage(p.inv_freq, p.n_rot / 2);
    if (d_freq == nullptr) return;
    Record(cuda::Rope(x, n, n_heads, head_dim, d_pos, d_freq, p.n_rot, p.offset,
                      p.style == RopeStyle::kInterleaved, p.mscale, stream_),
           "rope");
  }
  void StoreKv(const float* k, const float* v, const int32_t* positions, int64_t n, int64_t kv_dim,
               float* k_cache, float* v_cache) override {
    if (failed() || n <= 0) return;
    const auto* d_pos = Stage(positions, n);
    if (d_pos == nullptr) return;
    Record(cuda::StoreKv(k, v, d_pos, n, kv_dim, k_cache, v_cache, stream_), "store kv");
  }
  void Attention(const AttentionArgs& a) override {
    if (failed() || a.n <= 0) return;
    if (a.head_dim > cuda::kMaxHeadDim) {
      Record(absl::InvalidArgumentError(
          absl::StrCat("CUDA attention: head_dim ", a.head_dim, " is above ", cuda::kMaxHeadDim)));
      return;
    }
    const auto* d_pos = Stage(a.positions, a.n);
    if (d_pos == nullptr) return;
    const cuda::AttentionShape shape{a.n_heads, a.n_kv_heads, a.head_dim, a.scale,
                                     a.window,  a.ring,       a.sinks};
    Record(cuda::Attention(a.q, a.k_cache, a.v_cache, d_pos, a.n, shape, a.out, stream_),
           "attention");
  }
  void SiluMul(float* gate, const float* up, int64_t n) override {
    if (failed()) return;
    Record(cuda::SiluMul(gate, up, n, stream_), "silu mul");
  }
  void ClampedSwiGlu(float* gate, const float* up, int64_t n, float alpha, float limit) override {
    if (failed()) return;
    Record(cuda::ClampedSwiGlu(gate, up, n, alpha, limit, stream_), "clamped swiglu");
  }
  void Add(float* x, const float* y, int64_t n) override {
    if (failed()) return;
    Record(cuda::Add(x, y, n, stream_), "add");
  }
  void CopyStrided(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                   int64_t rows, int64_t cols) override {
    if (failed() || rows <= 0 || cols <= 0) return;
    Record(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_stride) * sizeof(float), src,
                             static_cast<size_t>(src_stride) * sizeof(float),
                             static_cast<size_t>(cols) * sizeof(float), static_cast<size_t>(rows),
                             cudaMemcpyDeviceToDevice, stream_),
           "copy strided");
  }
  void GatherRows(const float* src, const int32_t* rows, int64_t n, int64_t dim,
                  float* dst) override {
    if (failed() || n <= 0) return;
    const auto* d_rows = Stage(rows, n);
    if (d_rows == nullptr) return;
    Record(cuda::GatherRows(src, d_rows, n, dim, dst, stream_), "gather rows");
  }
  void ScatterAddRows(const float* src, const int32_t* rows, const float* scales, int64_t n,
                      int64_t dim, float* dst) override {
    if (failed() || n <= 0) return;
    const auto* d_rows = Stage(rows, n);
    const auto* d_scales = Stage(scales, n);
    if (d_rows == nullptr || d_scales == nullptr) return;
    Record(cuda::ScatterAddRows(src, d_rows, d_scales, n, dim, dst, stream_), "scatter add rows");
  }
  void MatMuls(std::span<const WeightRef> ws, const float* x, int64_t n,
               std::span<float* const> ys) override {
    MatMulsByOps(*this, ws, x, n, ys);
  }
  void ApplyExperts(const GroupedExpertsArgs& args) override { ApplyExpertsByOps(*this, args); }

  absl::Status Synchronize() override {
    Record(cudaStreamSynchronize(stream_), "synchronize");
    std::lock_guard<std::mutex> lock(status_mu_);
    absl::Status st = std::move(status_);
    status_ = absl::OkStatus();
    failed_.store(false);
    return st;
  }

  // Device tiers --------------------------------------------------------------------------------
  absl::Status TransferIn(void* dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    (void)cudaSetDevice(device_);
    std::unique_ptr<PinnedStager> stager;
    {
      std::lock_guard<std::mutex> lock(stager_mu_);
      if (!transfer_stagers_.empty()) {
        stager = std::move(transfer_stagers_.back());
        transfer_stagers_.pop_back();
      }
    }
    if (stager == nullptr) {
      stager = std::make_unique<PinnedStager>();
      if (auto st = stager->Init(nullptr); !st.ok()) return st;
    }
    cudaPointerAttributes attr{};
    const bool pinned =
        cudaPointerGetAttributes(&attr, host_src) == cudaSuccess && attr.type == cudaMemoryTypeHost;
    (void)cudaGetLastError();
    cudaError_t e =
        pinned ? cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stager->stream())
               : stager->Copy(dst, host_src, bytes);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stager->stream());
    absl::Status st =
        CudaStatus(e, absl::StrCat("transfer of ", FormatSize(bytes), " to the device"));
    std::lock_guard<std::mutex> lock(stager_mu_);
    transfer_stagers_.push_back(std::move(stager));
    return st;
  }

  std::unique_ptr<Fence> RecordFence() override {
    (void)cudaSetDevice(device_);
    cudaEvent_t ev = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(ev, stream_);
    return std::make_unique<CudaFence>(device_, ev, CudaStatus(e, "fence record"));
  }

  MemoryInfo memory_info() const override {
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaSetDevice(device_);
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return {};
    }
    return {free_bytes, total_bytes};
  }

 private:
  static constexpr size_t kRingBytes = 1u << 20;

  bool failed() const { return failed_.load(std::memory_order_relaxed); }

  absl::Status status() {
    std::lock_guard<std::mutex> lock(status_mu_);
    return status_;
  }

  void Record(absl::Status st) {
    if (st.ok()) return;
    std::lock_guard<std::mutex> lock(status_mu_);
    if (status_.ok()) status_ = std::move(st);
    failed_.store(true);
  }
  void Record(cudaError_t e, std::string_view what) {
    if (e != cudaSuccess) Record(CudaStatus(e, what));
  }

  std::string FreeText() const {
    const MemoryInfo m = memory_info();
    if (m.total_bytes == 0) return "";
    return absl::StrCat(" (", FormatSize(m.free_bytes), " free of ", FormatSize(m.total_bytes),
                        ")");
  }

  void* Ensure(Scratch* s, size_t bytes) {
    if (s->size >= bytes) return s->ptr;
    if (s->ptr != nullptr) Record(cudaFreeAsync(s->ptr, stream_), "scratch free");
    s->ptr = nullptr;
    s->size = 0;
    if (cudaError_t e = cudaMallocAsync(&s->ptr, bytes, stream_); e != cudaSuccess) {
      s->ptr = nullptr;
      Record(CudaStatus(e, absl::StrCat("scratch of ", FormatSize(bytes), FreeText())));
      return nullptr;
    }
    s->size = bytes;
    return s->ptr;
  }

  // Small host arrays the ops take (positions, ids, rows, scales): copied into a pinned ring
  // and from there to its device mirror on the compute stream. When the ring wraps, the stream
  // is synchronised first, so no queued copy still reads the part being overwritten.
  absl::Status GrowRing(size_t bytes) {
    if (ring_host_ != nullptr) {
      Record(cudaStreamSynchronize(stream_), "ring");
      (void)cudaFreeHost(ring_host_);
      (void)cudaFree(ring_device_);
      ring_host_ = nullptr;
      ring_device_ = nullptr;
    }
    if (auto st =
            CudaStatus(cudaHostAlloc(&ring_host_, bytes, cudaHostAllocDefault), "argument ring");
        !st.ok()) {
      ring_host_ = nullptr;
      return st;
    }
    if (auto st = CudaStatus(cudaMalloc(&ring_device_, bytes), "argument ring"); !st.ok()) {
      ring_device_ = nullptr;
      return st;
    }
    ring_size_ = bytes;
    ring_used_ = 0;
    return absl::OkStatus();
  }

  template <typename T>
  const T* Stage(const T* host, int64_t n) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(T);
    const size_t need = (bytes + 255) & ~size_t{255};
    if (need > ring_size_) {
      if (auto st = GrowRing(std::max(need * 2, ring_size_ * 2)); !st.ok()) {
        Record(st);
        return nullptr;
      }
    }
    if (ring_used_ + need > ring_size_) {
      Record(cudaStreamSynchronize(stream_), "argument ring");
      ring_used_ = 0;
    }
    auto* h = static_cast<uint8_t*>(ring_host_) + ring_used_;
    auto* d = static_cast<uint8_t*>(ring_device_) + ring_used_;
    ring_used_ += need;
    std::memcpy(h, host, bytes);
    if (cudaError_t e = cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream_);
        e != cudaSuccess) {
      Record(e, "argument upload");
      return nullptr;
    }
    return reinterpret_cast<const T*>(d);
  }

  void Blas(cublasStatus_t s, std::string_view what) {
    if (s != CUBLAS_STATUS_SUCCESS) {
      Record(absl::InternalError(
          absl::StrCat("cuBLAS ", std::string(what), ": ", cublasGetStatusString(s))));
    }
  }

  // y[n, rows] (+)= x[n, cols] · Wᵀ with cuBLAS (column-major view: Yᵀ = W · Xᵀ, W read
  // transposed with leading dimension cols).
  void Gemm(const WeightRef& w, const float* x, int64_t n, float* y, bool accumulate) {
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const int m_rows = static_cast<int>(w.rows), k = static_cast<int>(w.cols),
              nn = static_cast<int>(n);
    if (w.dtype == DType::kF32) {
      Blas(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, m_rows, nn, k, &alpha, w.data,
                        CUDA_R_32F, k, x, CUDA_R_32F, k, &beta, y, CUDA_R_32F, m_rows,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
           "sgemm");
      return;
    }
    // Activations in the weights' 16-bit type (F16 for the quantized types).
    const DType half_type = w.dtype == DType::kBF16 ? DType::kBF16 : DType::kF16;
    const cudaDataType_t cuda_type = half_type == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
    void* xh = Ensure(&x16_, static_cast<size_t>(n * w.cols) * 2);
    if (xh == nullptr) return;
    Record(cuda::ConvertF32(x, n * w.cols, half_type, xh, stream_), "convert activations");
    if (w.dtype == DType::kF16 || w.dtype == DType::kBF16) {
      Blas(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, m_rows, nn, k, &alpha, w.data, cuda_type,
                        k, xh, cuda_type, k, &beta, y, CUDA_R_32F, m_rows, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT),
           "gemm");
      return;
    }
    // Quantized: dequantize row chunks to F16 and multiply each.
    const size_t row_bytes16 = static_cast<size_t>(w.cols) * 2;
    const int64_t chunk = std::max<int64_t>(
        1,
        std::min<int64_t>(w.rows, static_cast<int64_t>(options_.gemm_scratch_bytes / row_bytes16)));
    void* wh = Ensure(&w16_, static_cast<size_t>(chunk) * row_bytes16);
    if (wh == nullptr) return;
    for (int64_t r0 = 0; r0 < w.rows && !failed(); r0 += chunk) {
      const int64_t m = std::min(chunk, w.rows - r0);
      Record(cuda::DequantizeRows(w.dtype, w.data, w.cols, r0, m, DType::kF16, wh, books_, stream_),
             "dequantize");
      Blas(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), nn, k, &alpha, wh,
                        CUDA_R_16F, k, xh, CUDA_R_16F, k, &beta, y + r0, CUDA_R_32F, m_rows,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
           "gemm");
    }
  }

  const CudaBackendOptions options_;
  const int device_;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t import_stream_ = nullptr;
  cudaEvent_t import_done_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<PinnedStager> import_stager_;
  std::mutex stager_mu_;
  std::vector<std::unique_ptr<PinnedStager>> transfer_stagers_;
  Scratch act_, x16_, w16_;
  void* codebooks_storage_ = nullptr;  // the i-quant / IQ4 / MXFP4 tables (books_ points into it)
  cuda::DeviceCodebooks books_{};
  void* ring_host_ = nullptr;
  void* ring_device_ = nullptr;
  size_t ring_size_ = 0, ring_used_ = 0;
  std::mutex status_mu_;
  absl::Status status_;
  std::atomic<bool> failed_{false};
};

CudaBuffer::~CudaBuffer() { backend_->Free(data_); }

}  // namespace

bool CudaBuilt() { return true; }

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

CudaVersions GetCudaVersions() {
  CudaVersions v;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  (void)cudaGetLastError();
  return v;
}

std::string CudaBuildArchitectures() { return COLIBRI_CUDA_ARCHITECTURES; }

absl::StatusOr<CudaDeviceInfo> GetCudaDeviceInfo(int device) {
  if (device < 0 || device >= CudaDeviceCount()) {
    return absl::UnavailableError(
        absl::StrCat("no CUDA device ", device, " (", CudaDeviceCount(), " found)"));
  }
  cudaDeviceProp prop{};
  if (auto st = CudaStatus(cudaGetDeviceProperties(&prop, device), "device properties"); !st.ok())
    return st;
  CudaDeviceInfo info;
  info.name = prop.name;
  info.compute_capability = prop.major * 10 + prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess) {
    // Double data rate: two transfers per clock.
    info.memory_bandwidth_gbps = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  }
  (void)cudaGetLastError();
  if (auto st = CudaStatus(cudaSetDevice(device), "set device"); !st.ok()) return st;
  size_t free_bytes = 0, total_bytes = 0;
  if (auto st = CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "memory info"); !st.ok())
    return st;
  info.free_bytes = free_bytes;
  info.total_bytes = total_bytes;
  return info;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  const int count = CudaDeviceCount();
  if (options.device < 0 || options.device >= count) {
    return absl::UnavailableError(
        absl::StrCat("CUDA backend: no device ", options.device, " (", count,
                     " CUDA devices found; is the NVIDIA driver loaded?)"));
  }
  if (options.gemm_min_rows < 1 || options.gemm_scratch_bytes < (1u << 20)) {
    return absl::InvalidArgumentError(
        "CUDA backend: gemm_min_rows must be >= 1 and gemm_scratch_bytes >= 1M");
  }
  auto backend = std::make_unique<CudaBackend>(options);
  if (auto st = backend->Init(); !st.ok()) {
    return absl::Status(
        st.code(), absl::StrCat("CUDA backend on device ", options.device, ": ", st.message()));
  }
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace colibri::backend
