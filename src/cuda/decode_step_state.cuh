// What every kernel of a decode step shares: programmatic dependent launch, the workspace view
// (Ws: q planes, Z, partials, the guard's flags and list, counters), the flag list's writer and
// the statistics' slots. Included by decode.cu inside its anonymous namespace, after
// decode_append.cuh.

// Programmatic dependent launch (on by default; FOLD_DECODE_PDL=0 turns it off). A kernel
// launched with programmatic stream serialization may start while its predecessor finishes;
// every decode kernel therefore waits (griddepcontrol.wait: the predecessor complete and its
// writes visible) before its first read, and signals at its end that its dependents may
// launch. Both are no-ops for a normal launch. (H200: 1-4 us less per B1 step, same bits.)
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

struct Ws {
  int8_t *qa, *qb;
  float *sq, *z;
  float *e;  // [rows]: the coarse error per unit of key scale (planes.h), written by the front
  int32_t *bad;
  float *part_n, *part_t, *part_tl;
  int32_t *flag;
  unsigned long long *gcnt;  // [B * Hkv][5]: keys, live, refine, v_refine, bytes (pass 0)
  int32_t *newlen, *rej;     // the step's append (AppendArgs)
  int32_t *nflag, *flist;    // the flagged groups (pass 1 runs over this list)
  int32_t *p1done;           // [B * Hkv]: pass-1 split blocks done
  int32_t *ring_next;        // the dense ring's next item (reset by the front)
  int32_t splits;
};

// Flags group grp for pass 1: the first to flag it appends it to the list. The list's order
// depends on timing, but no value does: pass 1 computes each listed group alone.
__device__ __forceinline__ void flag_group(const Ws &ws, int64_t grp) {
  if (atomicOr(&ws.flag[grp], 1) == 0) ws.flist[atomicAdd(ws.nflag, 1)] = static_cast<int32_t>(grp);
}

enum Stat { kKeys = 0, kLive, kRefine, kVRefine, kRows, kFixupRows, kBytes };

__device__ __forceinline__ unsigned long long *stat_ptr(int64_t *stats, int i) {
  return stats == nullptr ? nullptr : reinterpret_cast<unsigned long long *>(stats) + i;
}
