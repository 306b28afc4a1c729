"""The ONNX import's results: torchvision's networks imported, trained and compared."""

from .common import thousands
from .cpu import simple

ONNX_ZOO = "tools/bench/results/onnx/torchvision.csv"


def onnx_zoo_row(r):
    same = r["remat_params"] == r["params"] if r["remat_params"] else None
    params = thousands(r["params"]) + ("" if same is None else " (equal)" if same else
                                       f" (remat {thousands(r['remat_params'])})")
    return [r["model"], params, r["onnx_nodes"], r["remat_nodes"], r["maxbatch_keep"],
            r["maxbatch_checkmate"], r["step_s"] and r["step_s"] + " s",
            r["import_s"] and r["import_s"] + " s", r["status"]]


gen_onnx_zoo = simple(
    ONNX_ZOO,
    ["model", "params", "onnx_nodes", "status", "remat_nodes", "remat_params", "step_s",
     "maxbatch_keep", "maxbatch_checkmate", "import_s"],
    ["model", "parameters (PyTorch; remat's)", "ONNX nodes", "remat nodes",
     "max batch 16 GB, keep", "max batch 16 GB, checkmate", "train, 1 step", "import + plan",
     "import"], onnx_zoo_row)


gen_onnx_segmentation = simple(
    "tools/bench/results/onnx/torchvision_segmentation.csv",
    ["model", "params", "onnx_nodes", "status", "remat_nodes", "remat_params", "step_s",
     "maxbatch_keep", "maxbatch_checkmate", "import_s"],
    ["model", "parameters (PyTorch; remat's)", "ONNX nodes", "remat nodes",
     "max batch 16 GB, keep", "max batch 16 GB, checkmate", "train, 1 step at batch 2",
     "import + plan", "import"], onnx_zoo_row)


gen_onnx_resnet50 = simple(
    "tools/bench/results/onnx/resnet50_16gb.csv",
    ["model", "source", "nodes", "constant", "maxbatch_keep", "maxbatch_checkmate"],
    ["network", "from", "planned nodes", "constant", "max batch 16 GB, keep",
     "max batch 16 GB, checkmate"],
    lambda r: [r["model"], r["source"], r["nodes"], r["constant"], r["maxbatch_keep"],
               r["maxbatch_checkmate"]])
