// Block-wide inclusive prefix sum with CUB (CCCL) collectives.
#include <cub/block/block_load.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>

template <int THREADS, int ITEMS>
__global__ void block_prefix_sum(const int* __restrict__ in, int* __restrict__ out) {
  using Load = cub::BlockLoad<int, THREADS, ITEMS, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using Store = cub::BlockStore<int, THREADS, ITEMS, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  using Scan = cub::BlockScan<int, THREADS>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Store::TempStorage store;
    typename Scan::TempStorage scan;
  } tmp;
  int items[ITEMS];
  const int offset = blockIdx.x * THREADS * ITEMS;
  Load(tmp.load).Load(in + offset, items);
  __syncthreads();
  Scan(tmp.scan).InclusiveSum(items, items);
  __syncthreads();
  Store(tmp.store).Store(out + offset, items);
}
