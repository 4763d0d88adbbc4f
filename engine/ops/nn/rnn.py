"""lstm, gru, rnn_tanh, rnn_relu and their cells: torch's CPU composite (ATen's RNN.cpp), written
with the same ops in the same order, so their nodes, what those save, the temporaries they make
and when each dies are torch's (tests/engine/test_rnn.py).

Per layer and direction the whole sequence's input projection is one linear, unbound into steps;
each step adds it in place to the hidden projection, chunks the gates (unsafe_chunk: pieces that
share the gates' memory but are no autograd views) and applies the activations in place; the
steps' outputs are stacked, a bidirectional layer's two directions concatenated, dropout (the
engine's RNG) between layers in training. The final hidden states are stacked at the end.

torch's CUDA path runs cuDNN's fused kernels (a workspace and a reserve space); cuda and meta
run this composite all the same, so cuDNN's own allocations are not modelled. On cpu torch runs
float32 LSTMs through oneDNN when it is enabled (MkldnnRnnLayerBackward0, its own workspace):
the engine's figures are those of torch's composite (torch.backends.mkldnn disabled, float64,
or proj_size > 0), which is what torch runs for GRU and RNN in every dtype.
"""

from __future__ import annotations

from engine.ops.nn.linear import linear, mm_weight
from engine.ops.shape import cat, stack
from engine.ops.views import SplitViews
from engine.storage import alias_storage
from engine.tensor import Tensor


# ---------------------------------------------------------------------------------------------
# unsafe_chunk: the gates' pieces, sharing memory but not a version counter (no views)
# ---------------------------------------------------------------------------------------------
class UnsafeSplit(SplitViews):
    """torch's unsafe_split: the pieces alias the input's memory, each under a version counter
    of its own and without a view's history, so an in-place activation on one piece is that
    piece's own node (SigmoidBackward0), not a CopySlices of the whole. Backward is split's: one
    input-sized buffer (zeros for a piece without a gradient)."""

    def forward(self, x, out=None, dim=0, sizes=()):
        self.dim, self.sizes, self.unbind = dim, tuple(sizes), False
        self.in_shape = x.shape
        self.num_outputs = len(sizes)
        outs = []
        start = 0
        lead = (slice(None),) * dim
        for k in sizes:
            arr = x._data[lead + (slice(start, start + k), Ellipsis)]
            outs.append(Tensor._make(arr, alias_storage(x._storage), x._dtype, x._device))
            start += k
        return tuple(outs)

    def name(self):
        return "UnsafeSplitBackward0"


def unsafe_chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """`chunks` pieces of input along dim that share its memory (torch's unsafe_chunk)."""
    from engine.tensor import _wrap_dim

    d = _wrap_dim(dim, input.ndim)
    n = input.shape[d]
    k = -(-n // chunks)
    sizes = [min(k, n - i) for i in range(0, n, k)] or [0]
    return UnsafeSplit.apply(input, op="unsafe_chunk", dim=d, sizes=tuple(sizes))


# ---------------------------------------------------------------------------------------------
# the parameters of one layer and direction, and at::linear's dispatch
# ---------------------------------------------------------------------------------------------
class CellParams:
    """w_ih, w_hh, b_ih, b_hh (None without bias) and w_hr (None without projections)."""

    __slots__ = ("w_ih", "w_hh", "b_ih", "b_hh", "w_hr")

    def __init__(self, w_ih, w_hh, b_ih=None, b_hh=None, w_hr=None):
        self.w_ih, self.w_hh, self.b_ih, self.b_hh, self.w_hr = w_ih, w_hh, b_ih, b_hh, w_hr

    def linear_ih(self, x):
        return linear(x, self.w_ih, self.b_ih)

    def linear_hh(self, h):
        return linear(h, self.w_hh, self.b_hh)

    def matmul_hr(self, h):
        if self.w_hr is None:
            return h
        return mm_weight(h, self.w_hr)  # at::matmul(h, w_hr.t()): one mm


def gather_params(params, has_biases: bool, has_projections: bool = False) -> list[CellParams]:
    """The flat parameter list (per layer and direction: w_ih, w_hh[, b_ih, b_hh][, w_hr])."""
    n = 2 + 2 * has_biases + has_projections
    if len(params) % n:
        raise RuntimeError("got an incorrect number of RNN parameters")
    out = []
    for i in range(0, len(params), n):
        p = params[i : i + n]
        if has_biases:
            out.append(CellParams(p[0], p[1], p[2], p[3], p[4] if has_projections else None))
        else:
            out.append(CellParams(p[0], p[1], None, None, p[2] if has_projections else None))
    return out


# ---------------------------------------------------------------------------------------------
# cells: one step (pre: the input is the step's slice of the precomputed projection)
# ---------------------------------------------------------------------------------------------
def _simple_cell(activation):
    def cell(x, hidden, params, pre=False):
        # nonlinearity(linear_hh(h).add_(linear_ih(x))): both projections die after it
        gates = params.linear_hh(hidden)
        xi = x if pre else params.linear_ih(x)
        gates.add_(xi)
        y = activation(gates)
        del xi, gates
        return y

    return cell


def _lstm_cell(x, hidden, params, pre=False):
    hx, cx = hidden
    gates = params.linear_hh(hx)
    gates.add_(x if pre else params.linear_ih(x))
    ingate, forgetgate, cellgate, outgate = unsafe_chunk(gates, 4, 1)
    del gates
    ingate.sigmoid_()
    forgetgate.sigmoid_()
    cellgate.tanh_()
    outgate.sigmoid_()
    cy = (forgetgate * cx).add_(ingate * cellgate)
    hy = outgate * cy.tanh()
    hy = params.matmul_hr(hy)
    return hy, cy


def _gru_cell(x, hidden, params, pre=False):
    ig = unsafe_chunk(x if pre else params.linear_ih(x), 3, 1)
    hg = unsafe_chunk(params.linear_hh(hidden), 3, 1)
    reset_gate = hg[0].add_(ig[0]).sigmoid_()
    input_gate = hg[1].add_(ig[1]).sigmoid_()
    new_gate = ig[2].add(hg[2].mul_(reset_gate)).tanh_()
    hy = (hidden - new_gate).mul_(input_gate).add_(new_gate)
    del new_gate, input_gate, reset_gate, hg, ig  # C++'s locals, last declared first
    return hy


def _tanh(t):
    return t.tanh()


def _relu(t):
    return t.relu()


CELLS = {
    "lstm": _lstm_cell,
    "gru": _gru_cell,
    "rnn_tanh": _simple_cell(_tanh),
    "rnn_relu": _simple_cell(_relu),
}


def _as_output(hidden):
    return hidden[0] if isinstance(hidden, tuple) else hidden


# ---------------------------------------------------------------------------------------------
# layers: FullLayer and FullBidirectionalLayer (the cpu branch: input projection precomputed)
# ---------------------------------------------------------------------------------------------
def _release(tensors: list) -> None:
    """Drop a list's tensors first to last, as a std::vector's destructor does (a Python list
    lets its items go last first)."""
    for i in range(len(tensors)):
        tensors[i] = None


def _steps(cell, step_inputs, hidden, params):
    """(each step's output, the last hidden state)."""
    outputs = []
    for x in step_inputs:
        hidden = cell(x, hidden, params, True)
        outputs.append(_as_output(hidden))
    return outputs, hidden


def _full_layer(cell, inputs, hidden, params):
    inputs_w = params.linear_ih(inputs)
    outputs, hidden = _steps(cell, inputs_w.unbind(0), hidden, params)
    if not outputs:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    y = stack(outputs, 0)
    _release(outputs)
    del inputs_w
    return y, hidden


def _bidirectional_layer(cell, inputs, hidden, params):
    fw_params, rev_params = params
    input_w = fw_params.linear_ih(inputs)
    step_inputs = input_w.unbind(0)
    fw_outputs, fw_hidden = _steps(cell, step_inputs, hidden[0], fw_params)
    if not fw_outputs:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    fw_output = stack(fw_outputs, 0)
    input_w = rev_params.linear_ih(inputs)
    step_inputs = input_w.unbind(0)[::-1]  # the forward projection dies here
    rev_outputs, rev_hidden = _steps(cell, step_inputs, hidden[1], rev_params)
    rev_outputs.reverse()
    rev_output = stack(rev_outputs, 0)
    y = cat([fw_output, rev_output], fw_output.ndim - 1)
    # C++'s locals, last declared first
    del rev_output
    _release(rev_outputs)
    del step_inputs, fw_output
    _release(fw_outputs)
    del input_w
    return y, (fw_hidden, rev_hidden)


def _layer_stack(cell, input, hiddens, params, num_layers, dropout_p, train, bidirectional):
    """apply_layer_stack: (the last layer's output, each layer's final hidden state)."""
    from engine.ops.nn.dropout import dropout

    if bidirectional:
        hiddens = [(hiddens[i], hiddens[i + 1]) for i in range(0, len(hiddens), 2)]
        params = [(params[i], params[i + 1]) for i in range(0, len(params), 2)]
    layer = _bidirectional_layer if bidirectional else _full_layer
    if num_layers != len(hiddens):
        raise RuntimeError("Expected more hidden states in stacked_rnn")
    if num_layers != len(params):
        raise RuntimeError("Expected more weights in stacked_rnn")
    layer_input = input
    final = []
    for i in range(num_layers):
        layer_input, hidden = layer(cell, layer_input, hiddens[i], params[i])
        final.append(hidden)
        if dropout_p != 0 and train and i < num_layers - 1:
            layer_input = dropout(layer_input, dropout_p, True)
    if bidirectional:
        final = [h for pair in final for h in pair]
    return layer_input, final


def _rnn(
    kind, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
):
    _refuse_packed(input)
    x = input.transpose(0, 1) if batch_first else input
    params = gather_params(params, has_biases)
    output, final = _layer_stack(
        CELLS[kind], x, list(hx.unbind(0)), params, num_layers, dropout, train, bidirectional
    )
    del x
    h = stack(final, 0)
    _release(final)
    if batch_first:
        output.transpose_(0, 1)
    return output, h


def rnn_tanh(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """torch.rnn_tanh: (output, h_n) of a stack of tanh RNN layers."""
    return _rnn(
        "rnn_tanh",
        input,
        hx,
        params,
        has_biases,
        num_layers,
        dropout,
        train,
        bidirectional,
        batch_first,
    )


def rnn_relu(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """torch.rnn_relu: (output, h_n) of a stack of ReLU RNN layers."""
    return _rnn(
        "rnn_relu",
        input,
        hx,
        params,
        has_biases,
        num_layers,
        dropout,
        train,
        bidirectional,
        batch_first,
    )


def gru(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """torch.gru: (output, h_n)."""
    return _rnn(
        "gru", input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
    )


def lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """torch.lstm: (output, h_n, c_n); hx is (h_0, c_0), h_0's last size the projection's when
    the parameters carry w_hr."""
    _refuse_packed(input)
    if len(hx) != 2:
        raise RuntimeError("lstm expects two hidden states")
    _check_lstm_hidden(hx, num_layers, bidirectional)
    has_projections = hx[0].shape[2] != hx[1].shape[2]
    x = input.transpose(0, 1) if batch_first else input
    params = gather_params(params, has_biases, has_projections)
    hiddens = list(zip(hx[0].unbind(0), hx[1].unbind(0), strict=True))
    output, final = _layer_stack(
        _lstm_cell, x, hiddens, params, num_layers, dropout, train, bidirectional
    )
    del x, hiddens
    hy = [h for h, _ in final]
    cy = [c for _, c in final]
    del final
    # std::make_tuple(outputs, stack(hy), stack(cy)): the build evaluates arguments right to
    # left, so c_n is stacked first
    c_n = stack(cy, 0)
    h_n = stack(hy, 0)
    _release(cy)
    _release(hy)
    if batch_first:
        output = output.transpose(0, 1)
    return output, h_n, c_n


def _check_lstm_hidden(hx, num_layers, bidirectional):
    expected = num_layers * (2 if bidirectional else 1)
    for i, name in ((0, "h_0"), (1, "c_0")):
        if hx[i].ndim != 3:
            raise RuntimeError(
                f"For batched 3-D input, hx[{i}] ({name}) should be 3-D but got {hx[i].ndim}-D "
                "tensor"
            )
    for i, name in ((0, "h_0"), (1, "c_0")):
        if hx[i].shape[0] != expected:
            raise RuntimeError(
                f"Expected {name} size(0) to be {expected} (num_layers * num_directions), but "
                f"got {hx[i].shape[0]}"
            )


def _refuse_packed(input):
    if not isinstance(input, Tensor):
        raise NotImplementedError(
            f"engine's recurrent layers take a padded Tensor input, not {type(input).__name__} "
            "(PackedSequence is not supported)"
        )


# ---------------------------------------------------------------------------------------------
# the cells as functions: torch.lstm_cell, gru_cell, rnn_tanh_cell, rnn_relu_cell
# ---------------------------------------------------------------------------------------------
def _check_cell(input, hx, w_ih, w_hh, gates, label=0, weights_first=False):
    hidden_size = w_hh.shape[1]

    def weights():
        for name, w in (("weight_ih", w_ih), ("weight_hh", w_hh)):
            if w.shape[0] != gates * hidden_size:
                raise RuntimeError(
                    f"{name} first dim must be {gates} * hidden_size = {gates * hidden_size}, "
                    f"but got {w.shape[0]}"
                )

    if weights_first:
        weights()
    if input.shape[1] != w_ih.shape[1]:
        raise RuntimeError(
            f"input has inconsistent input_size: got {input.shape[1]} expected {w_ih.shape[1]}"
        )
    hiddens = hx if isinstance(hx, (tuple, list)) else (hx,)
    if not weights_first and gates == 4:
        weights()
    for i, h in enumerate(hiddens):
        if input.shape[0] != h.shape[0]:
            raise RuntimeError(
                f"Input batch size {input.shape[0]} doesn't match hidden{label + i} batch size "
                f"{h.shape[0]}"
            )
        if h.shape[1] != hidden_size:
            raise RuntimeError(
                f"hidden{label + i} has inconsistent hidden_size: got {h.shape[1]}, expected "
                f"{hidden_size}"
            )
    if not weights_first and gates == 3:
        weights()


def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """torch.lstm_cell: (h', c') of one step."""
    if len(hx) != 2:
        raise RuntimeError("lstm_cell expects two hidden states")
    _check_cell(input, hx, w_ih, w_hh, 4)
    return _lstm_cell(input, (hx[0], hx[1]), CellParams(w_ih, w_hh, b_ih, b_hh))


def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """torch.gru_cell: h' of one step."""
    _check_cell(input, hx, w_ih, w_hh, 3)
    return _gru_cell(input, hx, CellParams(w_ih, w_hh, b_ih, b_hh))


def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """torch.rnn_tanh_cell: tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)."""
    _check_cell(input, hx, w_ih, w_hh, 1, weights_first=True)
    return CELLS["rnn_tanh"](input, hx, CellParams(w_ih, w_hh, b_ih, b_hh))


def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """torch.rnn_relu_cell: relu(x W_ih^T + b_ih + h W_hh^T + b_hh)."""
    _check_cell(input, hx, w_ih, w_hh, 1, weights_first=True)
    return CELLS["rnn_relu"](input, hx, CellParams(w_ih, w_hh, b_ih, b_hh))
