// Gradient accumulation: K micro-batches per optimizer step, their parameter gradients summed in
// the persistent gradients (Note [gradient accumulation]).
#pragma once

#include "runtime/graph/graph.h"

namespace remat {

class OpRegistry;

// Note [gradient accumulation]
// A step of K micro-batches runs the plan K times, on samples [k N, (k + 1) N) of the step's K N
// samples, and the optimizer once. With K > 1 the training graph changes in one way: a node
// that wrote a parameter's gradient now writes an activation, "<param>.grad.micro", and the
// node right after it, "<param>.grad_accumulate" (op grad_accumulate), adds that into the
// persistent "<param>.grad": micro-batch 0 copies, the others add, the last also multiplies by
// 1/K. The optimizer then sees the mean gradient over the K N samples (each micro-batch's loss is
// a mean over its N), as one batch K times larger does, and the solver plans the micro-batch
// gradient like any activation: it lives from its node to the next, the same transient buffer
// PyTorch's AccumulateGrad allocates before `grad += new`. The schedule is planned once, for
// one micro-batch, and every micro-batch runs it. Only the optimizer step is per step: the
// learning-rate schedule, the update, the data-parallel gradient average (once, on the last
// micro-batch, as DDP's no_sync) and the logged loss (the mean of the K losses). Batch
// normalization normalizes each micro-batch by its own statistics and updates its running
// statistics once per micro-batch, as PyTorch does. Dropout masks are those of the K N samples
// of the step (ExecContext::batch_offset counts the micro-batch). A grad_accumulate node runs
// exactly once per micro-batch: plans never recompute a node that writes a persistent value
// (lower_schedule, Executor::run_node).
//
// Gives `g` (a training graph before its Update nodes: forward, loss, backward) the accumulate
// nodes for `micro_batches` micro-batches per step and sets g.micro_batches; 1 leaves it as it
// is. UserError outside [1, kMaxMicroBatches].
void add_gradient_accumulation(Graph& g, const OpRegistry& ops, int micro_batches);

}  // namespace remat
