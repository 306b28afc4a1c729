"""Every generated block's name and the function that makes it."""
from .cpu import gen_accumulate, gen_arena, gen_bf16_accuracy, gen_fuzz, gen_loader
from .gpu import gen_gpu_bench, gen_gpu_train
from .headline import gen_headline
from .maxbatch import (gen_maxbatch_precision, gen_maxbatch_sharded, gen_maxinput,
                       gen_offload_maxbatch, gen_offload_sweep)
from .notes import gen_notes
from .onnx import gen_onnx_resnet50, gen_onnx_segmentation, gen_onnx_zoo
from .solver import gen_solver_maxbatch, gen_solver_scale, gen_solver_zoo
from .zoo import gen_zoo_fig4, gen_zoo_fig5, gen_zoo_fig5_brackets, gen_zoo_files

TABLES = {
    "headline": gen_headline,
    "zoo-fig4": gen_zoo_fig4,
    "zoo-fig5": gen_zoo_fig5,
    "zoo-fig5-brackets": gen_zoo_fig5_brackets,
    "zoo-files": gen_zoo_files,
    "maxbatch-precision": gen_maxbatch_precision,
    "maxbatch-sharded": gen_maxbatch_sharded,
    "accumulate-cpu": gen_accumulate,
    "loader-cpu": gen_loader,
    "arena": gen_arena,
    "bf16-accuracy": gen_bf16_accuracy,
    "solver-zoo": gen_solver_zoo,
    "solver-scale": gen_solver_scale,
    "solver-maxbatch": gen_solver_maxbatch,
    "gpu-bench": gen_gpu_bench,
    "gpu-train": gen_gpu_train,
    "notes": gen_notes,
    "onnx-torchvision": gen_onnx_zoo,
    "onnx-segmentation": gen_onnx_segmentation,
    "onnx-resnet50": gen_onnx_resnet50,
    "maxinput-16gb": gen_maxinput,
    "offload-maxbatch": gen_offload_maxbatch,
    "offload-sweep": gen_offload_sweep,
    "fuzz": gen_fuzz,
}
