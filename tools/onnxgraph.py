"""An ONNX graph run by PyTorch, node by node, as a trainable torch.nn.Module: the reference side of
`fedhet-torch compare` (and of tests/mpi/test_onnx.sh for models written by hand).

It trains what fedhet trains: every float initializer is a parameter, except the batch norms' running statistics
(buffers, updated in training mode with the node's momentum) and the constants that fedhet reads as numbers (Clip's
bounds, Pow's exponent, Dropout's ratio, Pad's values, InstanceNormalization's scale and bias inside PyTorch's
GroupNorm pattern). Dropout and stochastic depth are refused unless their probability is 0: their masks cannot be
the same on both sides. The ops are those fedhet imports (docs/onnx.md); shapes are computed as the graph runs.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from onnx import numpy_helper

# inputs that fedhet reads as numbers or keeps as statistics: op -> slots
NOT_TRAINED = {"BatchNormalization": (3, 4), "InstanceNormalization": (1, 2), "Clip": (1, 2), "Pow": (1,),
               "Dropout": (1, 2), "Pad": (1, 2)}
BUFFERS = {"BatchNormalization": (3, 4)}


class Refused(Exception):
    pass


def attrs(node):
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def axes_of(node, inputs, k=1):
    a = attrs(node).get("axes")
    if a is None and len(inputs) > k and inputs[k] is not None:
        a = [int(v) for v in inputs[k].reshape(-1).tolist()]
    return a


class OnnxModule(torch.nn.Module):
    def __init__(self, model, dtype=torch.float32):
        super().__init__()
        self.graph = model.graph
        self.dtype = dtype
        self.opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [13])
        used_as = {}
        for n in self.graph.node:
            for k, name in enumerate(n.input):
                used_as.setdefault(name, set()).add((n.op_type, k))
        self.names = {}  # initializer name -> (kind, attribute name)
        for i, init in enumerate(self.graph.initializer):
            a = numpy_helper.to_array(init)
            uses = used_as.get(init.name, set())
            key = "p%d" % i
            if a.dtype.kind != "f":
                self.register_buffer(key, torch.from_numpy(np.array(a)), persistent=False)
                self.names[init.name] = key
                continue
            t = torch.from_numpy(np.array(a, dtype=np.float64)).to(dtype)
            fixed = any(k in NOT_TRAINED.get(op, ()) for op, k in uses)
            if any(k in BUFFERS.get(op, ()) for op, k in uses) or fixed:
                self.register_buffer(key, t)
            else:
                self.register_parameter(key, torch.nn.Parameter(t))
            self.names[init.name] = key
        self.input_name = [i.name for i in self.graph.input if i.name not in self.names][0]

    def forward(self, x):
        env = {self.input_name: x}
        for name, key in self.names.items():
            env[name] = getattr(self, key)
        for node in self.graph.node:
            ins = [env[i] if i else None for i in node.input]
            outs = self.run(node, ins)
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            for name, v in zip(node.output, outs):
                if name:
                    env[name] = v
        return env[self.graph.output[0].name]

    def const(self, v):
        return torch.tensor(v, dtype=self.dtype) if not torch.is_tensor(v) else v

    def run(self, node, ins):
        op, a = node.op_type, attrs(node)
        f = getattr(self, "op_" + op, None)
        if f is None:
            raise Refused("op %s is not one fedhet imports" % op)
        return f(node, a, ins)

    # ---- constants and shapes ----
    def op_Constant(self, n, a, ins):
        v = numpy_helper.to_array(n.attribute[0].t) if n.attribute[0].name == "value" else None
        if v is None:
            k = n.attribute[0].name
            v = np.array(a[k], dtype=np.int64 if k.endswith("int") or k.endswith("ints") else np.float32)
        t = torch.from_numpy(np.array(v))
        return t.to(self.dtype) if t.is_floating_point() else t

    def op_Shape(self, n, a, ins):
        s = torch.tensor(list(ins[0].shape), dtype=torch.int64)
        return s[a.get("start", 0):a.get("end", len(s))]

    def op_ConstantOfShape(self, n, a, ins):
        v = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
        t = torch.full(ins[0].tolist(), float(v.reshape(-1)[0]), dtype=self.dtype if v.dtype.kind == "f" else torch.int64)
        return t

    def op_Cast(self, n, a, ins):
        to = a["to"]
        return ins[0].to(self.dtype) if to in (1, 11) else ins[0].to(torch.int64) if to in (6, 7) else ins[0].bool()

    def op_Identity(self, n, a, ins):
        return ins[0]

    def op_Range(self, n, a, ins):
        return torch.arange(ins[0].item(), ins[1].item(), ins[2].item(), dtype=ins[0].dtype)

    def op_Equal(self, n, a, ins):
        return ins[0] == ins[1]

    def op_Less(self, n, a, ins):
        return ins[0] < ins[1]

    def op_Greater(self, n, a, ins):
        return ins[0] > ins[1]

    def op_Not(self, n, a, ins):
        return ~ins[0]

    def op_Where(self, n, a, ins):
        return torch.where(ins[0], ins[1], ins[2])

    def op_Mod(self, n, a, ins):
        return torch.fmod(ins[0], ins[1]) if a.get("fmod", 0) else torch.remainder(ins[0], ins[1])

    def op_RandomUniformLike(self, n, a, ins):
        raise Refused("a random draw in the graph (stochastic depth): compare it with the probability at 0")

    # ---- layers ----
    def op_Conv(self, n, a, ins):
        x, w = ins[0], ins[1]
        b = ins[2] if len(ins) > 2 else None
        p = a.get("pads", [0, 0, 0, 0])
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID"):
            raise Refused("auto_pad")
        if p[0] != p[2] or p[1] != p[3]:
            x = F.pad(x, (p[1], p[3], p[0], p[2]))
            p = [0, 0, 0, 0]
        return F.conv2d(x, w, b, a.get("strides", [1, 1]), (p[0], p[1]), a.get("dilations", [1, 1]), a.get("group", 1))

    def op_BatchNormalization(self, n, a, ins):
        x, w, b, rm, rv = ins
        return F.batch_norm(x, rm, rv, w, b, self.training, 1.0 - a.get("momentum", 0.9), a.get("epsilon", 1e-5))

    def op_InstanceNormalization(self, n, a, ins):
        return F.instance_norm(ins[0], weight=ins[1], bias=ins[2], eps=a.get("epsilon", 1e-5))

    def op_LayerNormalization(self, n, a, ins):
        axis = a.get("axis", -1)
        axis = axis + ins[0].dim() if axis < 0 else axis
        b = ins[2] if len(ins) > 2 else None
        return F.layer_norm(ins[0], ins[0].shape[axis:], ins[1], b, a.get("epsilon", 1e-5))

    def pool(self, n, a, ins, maxpool):
        k, s = a["kernel_shape"], a.get("strides", [1, 1])
        p = a.get("pads", [0, 0, 0, 0])
        x = ins[0]
        if p[0] != p[2] or p[1] != p[3]:
            x = F.pad(x, (p[1], p[3], p[0], p[2]), value=-math.inf if maxpool else 0.0)
            p = [0, 0, 0, 0]
        if maxpool:
            return F.max_pool2d(x, k, s, (p[0], p[1]), a.get("dilations", [1, 1]), bool(a.get("ceil_mode", 0)))
        return F.avg_pool2d(x, k, s, (p[0], p[1]), bool(a.get("ceil_mode", 0)), bool(a.get("count_include_pad", 0)))

    def op_MaxPool(self, n, a, ins):
        return self.pool(n, a, ins, True)

    def op_AveragePool(self, n, a, ins):
        return self.pool(n, a, ins, False)

    def op_GlobalAveragePool(self, n, a, ins):
        return ins[0].mean(dim=(2, 3), keepdim=True)

    def op_Gemm(self, n, a, ins):
        x = ins[0].t() if a.get("transA", 0) else ins[0]
        w = ins[1].t() if a.get("transB", 0) else ins[1]
        y = a.get("alpha", 1.0) * (x @ w)
        return y + a.get("beta", 1.0) * ins[2] if len(ins) > 2 and ins[2] is not None else y

    def op_MatMul(self, n, a, ins):
        return ins[0] @ ins[1]

    def op_Dropout(self, n, a, ins):
        ratio = float(ins[1]) if len(ins) > 1 and ins[1] is not None else a.get("ratio", 0.5)
        if self.training and ratio > 0:
            raise Refused("Dropout with ratio %g: compare it with the ratio at 0 (masks differ)" % ratio)
        return ins[0]

    def op_Pad(self, n, a, ins):
        p = ins[1].tolist() if len(ins) > 1 else a["pads"]
        h = len(p) // 2
        return F.pad(ins[0], tuple(v for k in reversed(range(h)) for v in (p[k], p[k + h])))

    # ---- element-wise ----
    def op_Relu(self, n, a, ins):
        return F.relu(ins[0])

    def op_Clip(self, n, a, ins):
        lo = float(ins[1]) if len(ins) > 1 and ins[1] is not None else a.get("min", -math.inf)
        hi = float(ins[2]) if len(ins) > 2 and ins[2] is not None else a.get("max", math.inf)
        return torch.clamp(ins[0], lo, hi)

    def op_LeakyRelu(self, n, a, ins):
        return F.leaky_relu(ins[0], a.get("alpha", 0.01))

    def op_Sigmoid(self, n, a, ins):
        return torch.sigmoid(ins[0])

    def op_HardSigmoid(self, n, a, ins):
        return torch.clamp(a.get("alpha", 0.2) * ins[0] + a.get("beta", 0.5), 0, 1)

    def op_HardSwish(self, n, a, ins):
        return F.hardswish(ins[0])

    def op_Tanh(self, n, a, ins):
        return torch.tanh(ins[0])

    def op_Erf(self, n, a, ins):
        return torch.erf(ins[0])

    def op_Sqrt(self, n, a, ins):
        return torch.sqrt(ins[0])

    def op_Exp(self, n, a, ins):
        return torch.exp(ins[0])

    def op_Pow(self, n, a, ins):
        return torch.pow(ins[0], ins[1])

    def op_Add(self, n, a, ins):
        return ins[0] + ins[1]

    def op_Sub(self, n, a, ins):
        return ins[0] - ins[1]

    def op_Mul(self, n, a, ins):
        return ins[0] * ins[1]

    def op_Div(self, n, a, ins):
        return ins[0] / ins[1] if ins[0].is_floating_point() or ins[1].is_floating_point() else \
            torch.div(ins[0], ins[1], rounding_mode="trunc")

    def op_Softmax(self, n, a, ins):
        return torch.softmax(ins[0], a.get("axis", -1 if self.opset >= 13 else 1))

    def op_ReduceMean(self, n, a, ins):
        axes = axes_of(n, ins)
        return ins[0].mean(dim=tuple(axes), keepdim=bool(a.get("keepdims", 1))) if axes else ins[0].mean()

    # ---- shapes of activations ----
    def op_Reshape(self, n, a, ins):
        shape = ins[1].tolist()
        if not a.get("allowzero", 0):
            shape = [ins[0].shape[k] if v == 0 else v for k, v in enumerate(shape)]
        return ins[0].reshape(shape)

    def op_Flatten(self, n, a, ins):
        axis = a.get("axis", 1)
        return ins[0].reshape(int(np.prod(ins[0].shape[:axis])), -1)

    def op_Transpose(self, n, a, ins):
        return ins[0].permute(a.get("perm", list(reversed(range(ins[0].dim())))))

    def op_Squeeze(self, n, a, ins):
        axes = axes_of(n, ins)
        return ins[0].squeeze() if not axes else ins[0].squeeze(tuple(axes)) if len(axes) > 1 else ins[0].squeeze(axes[0])

    def op_Unsqueeze(self, n, a, ins):
        y = ins[0]
        for ax in sorted(v + y.dim() + len(axes_of(n, ins)) if v < 0 else v for v in axes_of(n, ins)):
            y = y.unsqueeze(ax)
        return y

    def op_Concat(self, n, a, ins):
        return torch.cat(ins, a["axis"])

    def op_Slice(self, n, a, ins):
        x = ins[0]
        starts, ends = ins[1].tolist(), ins[2].tolist()
        axes = ins[3].tolist() if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
        steps = ins[4].tolist() if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
        idx = [slice(None)] * x.dim()
        flips = []
        for s, e, ax, st in zip(starts, ends, axes, steps):
            if st > 0:
                idx[ax] = slice(s, e, st)
            else:  # PyTorch has no negative steps: flip, then slice
                dim = x.shape[ax]
                s = s + dim if s < 0 else min(s, dim - 1)
                e = e + dim if e < 0 and e > -dim - 1 else (-1 if e < -dim else min(e, dim - 1))
                flips.append(ax)
                idx[ax] = slice(dim - 1 - s, dim - 1 - e, -st)
        if flips:
            x = x.flip(flips)
        return x[tuple(idx)]

    def op_Split(self, n, a, ins):
        axis = a.get("axis", 0)
        sizes = ins[1].tolist() if len(ins) > 1 and ins[1] is not None else a.get("split")
        if sizes is None:
            sizes = [ins[0].shape[axis] // len(n.output)] * len(n.output)
        return list(torch.split(ins[0], sizes, axis))

    def op_Gather(self, n, a, ins):
        axis = a.get("axis", 0)
        idx = ins[1].long()
        idx = torch.where(idx < 0, idx + ins[0].shape[axis], idx)
        y = torch.index_select(ins[0], axis, idx.reshape(-1))
        return y.reshape(ins[0].shape[:axis] + idx.shape + ins[0].shape[axis + 1:])

    def op_Expand(self, n, a, ins):
        shape = ins[1].tolist()
        nd = max(len(shape), ins[0].dim())
        cur = [1] * (nd - ins[0].dim()) + list(ins[0].shape)
        shape = [1] * (nd - len(shape)) + shape
        return ins[0].reshape(cur).expand([max(c, s) for c, s in zip(cur, shape)])


def nudged(module, seed=7):
    """module's parameters times (1 + 1e-7 N(0, 1)), in place: one rounding's worth"""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(1 + 1e-7 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype))
    return module


def steps(module, x, y, batch, steps_n, lr):
    """logits of the first batch in evaluation mode, then the losses of `steps_n` plain SGD steps in training mode"""
    module.eval()
    with torch.no_grad():
        logits = module(x[:batch]).detach().cpu().numpy()
    module.train()
    opt = torch.optim.SGD(module.parameters(), lr=lr)
    losses = []
    for s in range(steps_n):
        opt.zero_grad()
        loss = F.cross_entropy(module(x[s * batch:(s + 1) * batch]), y[s * batch:(s + 1) * batch].long())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return logits, np.array(losses)
