"""Process-wide settings. Read from the environment at import; assign to change them later.

One attribute per entry of the C++ settings table (csrc/core/flags.cpp), which holds each
setting's type, default, environment variable and doc (`torchlite.settings.table()`).
compile() and explain() read these values when they are called, so a change applies to code
compiled after it. Compile-scope settings can also be given per call:
`torchlite.compile(fn, options={"channels_last": False})`.
"""

from torchlite import _C

_env = _C.settings_from_env()

# --- compile scope (options= may override them per torchlite.compile call) -------------------
# Rewrite in-place ops on intermediates out of place so they fuse (TORCHLITE_FUNCTIONALIZE).
functionalize: bool = _env["functionalize"]
# Fold inference batch norm into the convolution before it (TORCHLITE_FOLD_BATCH_NORM).
fold_batch_norm: bool = _env["fold_batch_norm"]
# True/False: always/never run convolutions channels-last; None: CUDA f16/bf16 only.
channels_last: bool | None = _env["channels_last"]
# Channels-last convolutions read a copy of their weight made once per parameter version, not
# converted every call (TORCHLITE_CACHE_CONV_WEIGHTS). Off by default: writes through w.data,
# numpy or DLPack views bypass the version counter the cache checks.
cache_conv_weights: bool = _env["cache_conv_weights"]
# Otherwise each call converts all of a graph's channels-last convolution weights in one launch
# at its start, not torch once per convolution (off: torch converts them).
convert_conv_weights: bool = _env["convert_conv_weights"]
# Check the graph after every compiler pass and name the pass that broke it (TORCHLITE_VERIFY).
verify: bool = _env["verify"]
# Graphs autograd records get a compiled backward (TORCHLITE_COMPILED_BACKWARD); False: op by op.
compiled_backward: bool = _env["compiled_backward"]
# Backward recomputes cheap pointwise values where that saves memory (off: save all it reads).
recompute_in_backward: bool = _env["recompute_in_backward"]
# Backward recomputes a matmul's pointwise input from values it has already instead of the
# forward saving it (TORCHLITE_RECOMPUTE_MATMUL_INPUTS): less memory, one more backward kernel.
recompute_matmul_inputs: bool = _env["recompute_matmul_inputs"]
# Independent pointwise kernels with the same body run as one launch (TORCHLITE_GROUP_KERNELS).
group_kernels: bool = _env["group_kernels"]
# Cache entries (guard sets) per code object; past this the code runs eagerly with a warning.
cache_size_limit: int = _env["cache_size_limit"]
# Record compiled CUDA graphs into CUDA graphs after a warm-up call (TORCHLITE_CUDA_GRAPHS;
# mode="reduce-overhead"), and how often one graph may record before it runs without.
cuda_graphs: bool = _env["cuda_graphs"]
cuda_graphs_limit: int = _env["cuda_graphs_limit"]
# Time launch configurations (grids; pointwise block sizes) of generated CUDA kernels, cached
# on disk (TORCHLITE_AUTOTUNE).
autotune: bool = _env["autotune"]
# Under autotune, also try kernels' other block sizes (TORCHLITE_AUTOTUNE_BLOCKS).
autotune_blocks: bool = _env["autotune_blocks"]
# False: CPU graphs run op by op through torch, as in a build without LLVM (TORCHLITE_CPU_KERNELS).
cpu_kernels: bool = _env["cpu_kernels"]
# None: half-precision CUDA matrix products with sizes not a multiple of 8 run on zero-padded
# operands where that is cheaper (TORCHLITE_PAD_MATMULS); True: every such product; False: never.
pad_matmuls: bool | None = _env["pad_matmuls"]
# Operands of batched products that torch would copy (attention's q @ k.T) are copied by a
# kernel fused into their producer instead (TORCHLITE_MATMUL_LAYOUTS); False: torch's copies.
matmul_layouts: bool = _env["matmul_layouts"]
# Identical calls on the same operands (a mask every layer rebuilds) are computed once
# (TORCHLITE_MERGE_DUPLICATES); False: every call runs.
merge_duplicates: bool = _env["merge_duplicates"]
# Linears of at most 8 input and 16 output features over many rows (CaiT's talking heads) are
# multiply-adds in generated kernels (TORCHLITE_SMALL_PRODUCTS); False: torch's product.
small_products: bool = _env["small_products"]
# None: attention with a float mask (T5's position bias) that torch would run on its math path
# on CUDA is two batched products around one generated softmax kernel
# (TORCHLITE_DECOMPOSE_ATTENTION); True: every such call on every device; False: never.
decompose_attention: bool | None = _env["decompose_attention"]

# --- process scope ---------------------------------------------------------------------------
# TORCHLITE_TRACE=1: dump graphs (after every pass), guards, lowered IR, kernels to debug_dir.
trace: bool = _env["trace"]
debug_dir: str = _env["debug_dir"]
# TORCHLITE_LOGS=graph_breaks,recompiles,guards,kernels: channels sent to the "torchlite" logger.
logs: str = _env["logs"]
# On-disk kernel cache (TORCHLITE_CACHE_DIR); "" turns it off.
cache_dir: str = _env["cache_dir"]
# Size cap of the disk cache in MB, least recently used entries evicted (TORCHLITE_CACHE_MAX_MB).
cache_max_mb: int = _env["cache_max_mb"]
# TORCHLITE_DISABLE=1: torchlite.compile returns its input unchanged.
disable: bool = _env["disable"]
# TORCHLITE_CHECK_META=1: every meta result capture infers in C++ is checked against torch's.
check_meta: bool = _env["check_meta"]
# Idle memory the CPU buffer pool keeps, in MB (TORCHLITE_CPU_POOL_MB; read at its first use).
cpu_pool_mb: int = _env["cpu_pool_mb"]
# 256: LLVM's vector width for CPU kernels; 0: 512 on AVX-512 (read at the first CPU compile).
cpu_vector_bits: int = _env["cpu_vector_bits"]
# libnvrtc.so to load (TORCHLITE_NVRTC), and a CUDA toolkit to search (CUDA_HOME).
nvrtc: str = _env["nvrtc"]
cuda_home: str = _env["cuda_home"]

del _env
