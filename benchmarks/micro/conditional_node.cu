// What a decode step's last kernel boundary costs in a CUDA graph, and what a conditional node
// that skips it would cost instead (notes/decode.md section 54). A decode step ends with the
// combine (which sets the guard's flags) and pass 1 (which fixes flagged groups and adds the
// step's statistics); with nothing flagged pass 1's work is small and its cost is its boundary
// (section 40: 2.6-2.9 µs at B1). A graph IF node whose condition the combine sets from the device
// (cudaGraphSetConditional) would run pass 1 only when a group is flagged. This measures, per
// step of a chain of kSteps steps captured in one graph (replays timed by events, median of
// kReps):
//   a  combine -> pass1                  (today's shape: two kernels, pass 1 with PDL)
//   b  combine -> IF(flag) { pass1 }     (the flag left 0: the body skipped)
//   b1 the same with the flag set to 1   (the rare path: the body runs)
//   c  combine alone                     (the floor: no second boundary)
// The kernels are stand-ins with the real grids' shapes (B1: 16 combine blocks, 264 pass-1
// blocks of 256 threads) doing a few loads and stores, so the differences are boundaries.
//   nvcc -O3 -std=c++17 -arch=sm_90a -o conditional_node benchmarks/micro/conditional_node.cu
//   ./conditional_node [combine_blocks pass1_blocks]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"

constexpr int kSteps = 32;
constexpr int kReps = 30;

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// The combine's stand-in: each block reads a few partials, writes a result; block 0 sets the
// condition (one writer: concurrent cudaGraphSetConditional calls are undefined).
__global__ void combine_like(float *part, float *out, int *flag, cudaGraphConditionalHandle h,
                             int use_handle, int set_value) {
  pdl_wait();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float s = 0.0f;
  for (int k = 0; k < 4; ++k) s += __ldcg(part + (i + k * 4096) % (1 << 20));
  out[i] = s;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    flag[0] = set_value;
    if (use_handle) cudaGraphSetConditional(h, set_value);
  }
  pdl_trigger();
}

// Pass 1's stand-in: every block reads the flag (and a statistic per thread), exits when unset.
__global__ void pass1_like(const int *flag, float *out, unsigned long long *stats) {
  pdl_wait();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (__ldcg(flag) != 0) out[i] += 1.0f;
  if (threadIdx.x == 0) atomicAdd(stats + (blockIdx.x & 7), 1ull);
  pdl_trigger();
}

struct Bufs {
  float *part, *out;
  int *flag;
  unsigned long long *stats;
};

void launch(const void *fn, int blocks, void **args, cudaStream_t s, bool pdl) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(256);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CK(cudaLaunchKernelExC(&cfg, fn, args));
}

// One graph of kSteps steps of the given form; 'a', 'b', 'c'. set: the flag's value.
cudaGraphExec_t build(char form, int cb, int pb, Bufs b, int set, cudaStream_t s,
                      cudaStream_t body_stream) {
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus st;
  cudaGraph_t graph;
  CK(cudaStreamGetCaptureInfo(s, &st, nullptr, &graph, nullptr, nullptr, nullptr));
  for (int step = 0; step < kSteps; ++step) {
    cudaGraphConditionalHandle h = 0;
    int use = 0;
    if (form == 'b') {
      CK(cudaGraphConditionalHandleCreate(&h, graph, 0, cudaGraphCondAssignDefault));
      use = 1;
    }
    void *cargs[] = {&b.part, &b.out, &b.flag, &h, &use, &set};
    launch(reinterpret_cast<const void *>(combine_like), cb, cargs, s, step > 0);
    void *pargs[] = {&b.flag, &b.out, &b.stats};
    if (form == 'a') {
      launch(reinterpret_cast<const void *>(pass1_like), pb, pargs, s, true);
    } else if (form == 'b') {
      const cudaGraphNode_t *deps;
      size_t ndeps;
      CK(cudaStreamGetCaptureInfo(s, &st, nullptr, nullptr, &deps, nullptr, &ndeps));
      cudaGraphNodeParams np = {};
      np.type = cudaGraphNodeTypeConditional;
      np.conditional.handle = h;
      np.conditional.type = cudaGraphCondTypeIf;
      np.conditional.size = 1;
      cudaGraphNode_t node;
      CK(cudaGraphAddNode(&node, graph, deps, nullptr, ndeps, &np));
      CK(cudaStreamUpdateCaptureDependencies(s, &node, nullptr, 1,
                                             cudaStreamSetCaptureDependencies));
      cudaGraph_t body = np.conditional.phGraph_out[0];
      CK(cudaStreamBeginCaptureToGraph(body_stream, body, nullptr, nullptr, 0,
                                       cudaStreamCaptureModeGlobal));
      launch(reinterpret_cast<const void *>(pass1_like), pb, pargs, body_stream, false);
      cudaGraph_t done;
      CK(cudaStreamEndCapture(body_stream, &done));
    }
  }
  cudaGraph_t g;
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphDestroy(g));
  return exec;
}

float step_us(cudaGraphExec_t exec, cudaStream_t s) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int r = 0; r < kReps + 3; ++r) {
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 3) t.push_back(ms * 1e3f / kSteps);
  }
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return t[t.size() / 2];
}

int main(int argc, char **argv) {
  const int cb = argc > 1 ? std::atoi(argv[1]) : 16, pb = argc > 2 ? std::atoi(argv[2]) : 264;
  Bufs b;
  CK(cudaMalloc(&b.part, (1 << 20) * sizeof(float)));
  CK(cudaMemset(b.part, 0, (1 << 20) * sizeof(float)));
  CK(cudaMalloc(&b.out, static_cast<size_t>(std::max(cb, pb)) * 256 * sizeof(float)));
  CK(cudaMalloc(&b.flag, sizeof(int)));
  CK(cudaMalloc(&b.stats, 8 * sizeof(unsigned long long)));
  cudaStream_t s, body;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&body, cudaStreamNonBlocking));
  std::printf(
      "combine %d blocks, pass 1 %d blocks; per step, µs (median of %d replays of %d "
      "steps)\n",
      cb, pb, kReps, kSteps);
  struct Arm {
    const char *name;
    char form;
    int set;
  } arms[] = {{"a  combine -> pass1 (PDL)", 'a', 0},
              {"b  combine -> IF(0) {pass1}", 'b', 0},
              {"b1 combine -> IF(1) {pass1}", 'b', 1},
              {"c  combine alone", 'c', 0}};
  for (int round = 0; round < 2; ++round)
    for (const Arm &arm : arms) {
      cudaGraphExec_t e = build(arm.form, cb, pb, b, arm.set, s, body);
      std::printf("  %-30s %7.2f\n", arm.name, step_us(e, s));
      CK(cudaGraphExecDestroy(e));
    }
  unsigned long long st[8];
  CK(cudaMemcpy(st, b.stats, sizeof st, cudaMemcpyDeviceToHost));
  std::printf("(pass-1 blocks run, slot 0: %llu)\n", st[0]);
  return 0;
}
