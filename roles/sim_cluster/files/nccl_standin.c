/* dgx_spark.vllm simulated cluster: a stand-in for NCCL's libnccl.so.2 (the CPU build loads no NCCL).
 * It carries what the collection reads of a real one: the version banner NCCL prints ("NCCL version
 * 2.28.9+cuda13.0"), ncclGetVersion(), and a GNU build ID. Two builds of this one source, told apart by
 * NCCL_STANDIN_BUILD, stand for the pip wheel's library in the runtime image and the DGX OS package's on the
 * node: the same version, different builds, as on a Spark (vllm-project/vllm#41725). */
#ifndef NCCL_STANDIN_BUILD
#error "build with -DNCCL_STANDIN_BUILD='\"...\"'"
#endif
const char nccl_standin_banner[] = "NCCL version 2.28.9+cuda13.0";
const char nccl_standin_build[] = NCCL_STANDIN_BUILD;
int ncclGetVersion(int *version) { *version = 22809; return 0; }
