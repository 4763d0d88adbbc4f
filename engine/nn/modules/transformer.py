"""MultiheadAttention, TransformerEncoderLayer / TransformerEncoder, TransformerDecoderLayer /
TransformerDecoder and Transformer (PyTorch's layouts).

multi_head_attention_forward follows torch.nn.functional's (torch 2.13) step for step, so the
tensors it makes, and their bytes, are PyTorch's: the packed in-projection for self-attention
(one linear to 3E, then `unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2)
.contiguous()`: a second 3E-wide copy), the explicit bmm / softmax / dropout / bmm path when
`need_weights=True`, scaled_dot_product_attention when `need_weights=False`, then the output
projection. The fast paths PyTorch takes only in inference (`_native_multi_head_attention`, the
encoder's sparsity fast path) are not modelled.
"""

from __future__ import annotations

import copy
import math

from engine import dtypes
from engine.allocator.tracked import context
from engine.creation import empty, zeros_like
from engine.nn import functional as F
from engine.nn import init
from engine.nn.modules.container import ModuleList
from engine.nn.modules.dropout import Dropout
from engine.nn.modules.linear import Linear
from engine.nn.modules.module import Module
from engine.nn.modules.normalization import LayerNorm
from engine.nn.parameter import Parameter
from engine.ops.attention import scaled_dot_product_attention
from engine.tensor import Tensor


def _ops():
    from engine.ops import _ns

    return _ns


def _canonical_mask(mask, name: str, target_type):
    """A bool mask becomes zeros_like(mask, dtype).masked_fill_(mask, -inf); float stays."""
    if mask is None:
        return None
    if mask._dtype is not dtypes.bool_ and not mask._dtype.is_floating_point:
        raise RuntimeError(f"only bool and floating types of {name} are supported")
    if mask._dtype is dtypes.bool_:
        return zeros_like(mask, dtype=target_type).masked_fill_(mask, float("-inf"))
    return mask


def _in_projection_packed(q, k, v, w, b):
    ops = _ops()
    E = q.shape[-1]
    if k is v:
        if q is k:  # self-attention: one linear, then the (3, E) split made contiguous
            proj = F.linear(q, w, b)
            proj = proj.reshape(proj.shape[:-1] + (3, E))
            proj = ops["transpose"](ops["unsqueeze"](proj, 0), 0, -2)
            proj = ops["squeeze"](proj, -2).contiguous()
            return proj[0], proj[1], proj[2]
        w_q, w_kv = ops["split"](w, [E, E * 2])
        b_q, b_kv = (None, None) if b is None else ops["split"](b, [E, E * 2])
        q_proj = F.linear(q, w_q, b_q)
        kv = F.linear(k, w_kv, b_kv)
        kv = kv.reshape(kv.shape[:-1] + (2, E))
        kv = ops["squeeze"](ops["transpose"](ops["unsqueeze"](kv, 0), 0, -2), -2).contiguous()
        return q_proj, kv[0], kv[1]
    w_q, w_k, w_v = ops["chunk"](w, 3)
    b_q, b_k, b_v = (None, None, None) if b is None else ops["chunk"](b, 3)
    return F.linear(q, w_q, b_q), F.linear(k, w_k, b_k), F.linear(v, w_v, b_v)


def multi_head_attention_forward(
    query,
    key,
    value,
    embed_dim_to_check,
    num_heads,
    in_proj_weight,
    in_proj_bias,
    dropout_p,
    out_proj_weight,
    out_proj_bias,
    training=True,
    key_padding_mask=None,
    need_weights=True,
    attn_mask=None,
    use_separate_proj_weight=False,
    q_proj_weight=None,
    k_proj_weight=None,
    v_proj_weight=None,
    average_attn_weights=True,
    is_causal=False,
):
    """torch.nn.functional.multi_head_attention_forward (without bias_k/v, add_zero_attn, static_k/v).

    query [L, N, E] (or [L, E] unbatched), key/value [S, N, E]; returns (output [L, N, E],
    weights [N, L, S] averaged over heads, or [N, H, L, S], or None when need_weights=False).
    """
    ops = _ops()
    is_batched = query.ndim == 3
    if query.ndim not in (2, 3):
        raise RuntimeError(
            f"query should be unbatched 2D or batched 3D tensor but received {query.ndim}-D "
            "query tensor"
        )
    if not is_batched:
        query, key, value = (ops["unsqueeze"](t, 1) for t in (query, key, value))
        if key_padding_mask is not None:
            key_padding_mask = ops["unsqueeze"](key_padding_mask, 0)
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", query._dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError(
            "Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
            "method `generate_square_subsequent_mask` to create this mask."
        )
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None  # SDPA's is_causal replaces the mask
    else:
        attn_mask = _canonical_mask(attn_mask, "attn_mask", query._dtype)
        if key_padding_mask is not None:
            is_causal = False
    if embed_dim != embed_dim_to_check:
        raise RuntimeError(
            f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed_dim}"
        )
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise RuntimeError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")

    if not use_separate_proj_weight:
        q, k, v = _in_projection_packed(query, key, value, in_proj_weight, in_proj_bias)
    else:
        b_q = b_k = b_v = None
        if in_proj_bias is not None:
            b_q, b_k, b_v = ops["chunk"](in_proj_bias, 3)
        q = F.linear(query, q_proj_weight, b_q)
        k = F.linear(key, k_proj_weight, b_k)
        v = F.linear(value, v_proj_weight, b_v)

    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                raise RuntimeError(
                    f"The shape of the 2D attn_mask is {list(attn_mask.shape)}, but should be "
                    f"{[tgt_len, src_len]}."
                )
            attn_mask = ops["unsqueeze"](attn_mask, 0)
        elif attn_mask.ndim == 3:
            if tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
                raise RuntimeError(
                    f"The shape of the 3D attn_mask is {list(attn_mask.shape)}, but should be "
                    f"{[bsz * num_heads, tgt_len, src_len]}."
                )
        else:
            raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")

    q = ops["transpose"](q.view(tgt_len, bsz * num_heads, head_dim), 0, 1)
    k = ops["transpose"](k.view(k.shape[0], bsz * num_heads, head_dim), 0, 1)
    v = ops["transpose"](v.view(v.shape[0], bsz * num_heads, head_dim), 0, 1)
    src_len = k.shape[1]

    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (bsz, src_len):
            raise RuntimeError(
                f"expecting key_padding_mask shape of {(bsz, src_len)}, but got "
                f"{tuple(key_padding_mask.shape)}"
            )
        kpm = key_padding_mask.view(bsz, 1, 1, src_len).expand(-1, num_heads, -1, -1)
        kpm = kpm.reshape(bsz * num_heads, 1, src_len)
        attn_mask = kpm if attn_mask is None else ops["add"](attn_mask, kpm)

    if not training:
        dropout_p = 0.0

    if need_weights:
        E = q.shape[-1]
        q_scaled = ops["mul"](q, math.sqrt(1.0 / float(E)))
        # torch.baddbmm(attn_mask, q_scaled, k^T): one new buffer, the mask added into it
        weights = ops["matmul"](q_scaled, ops["transpose"](k, -2, -1))
        if attn_mask is not None:
            weights = ops["add_"](weights, attn_mask)
        del q_scaled, k
        weights = ops["softmax"](weights, -1)
        if dropout_p > 0.0:
            weights = F.dropout(weights, p=dropout_p)
        out = ops["matmul"](weights, v)
        del v
        out = ops["transpose"](out, 0, 1).reshape(tgt_len * bsz, embed_dim)
        out = F.linear(out, out_proj_weight, out_proj_bias)
        out = out.view(tgt_len, bsz, out.shape[1])
        weights = weights.view(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            weights = ops["mean"](weights, 1)
        if not is_batched:
            out = ops["squeeze"](out, 1)
            weights = ops["squeeze"](weights, 0)
        return out, weights

    if attn_mask is not None:
        if attn_mask.shape[0] == 1 and attn_mask.ndim == 3:
            attn_mask = ops["unsqueeze"](attn_mask, 0)
        else:
            attn_mask = attn_mask.view(bsz, num_heads, -1, src_len)
    q = q.view(bsz, num_heads, tgt_len, head_dim)
    k = k.view(bsz, num_heads, src_len, head_dim)
    v = v.view(bsz, num_heads, src_len, head_dim)
    out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    del q, k, v
    out = ops["permute"](out, 2, 0, 1, 3).reshape(bsz * tgt_len, embed_dim)
    out = F.linear(out, out_proj_weight, out_proj_bias)
    out = out.view(tgt_len, bsz, out.shape[1])
    if not is_batched:
        out = ops["squeeze"](out, 1)
    return out, None


class MultiheadAttention(Module):
    """PyTorch's MultiheadAttention: packed in_proj_weight [3E, E], out_proj Linear(E, E).

    >>> mha = MultiheadAttention(64, 4, batch_first=True)
    >>> y, w = mha(x, x, x, need_weights=False)   # w is None
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        dropout=0.0,
        bias=True,
        add_bias_kv=False,
        add_zero_attn=False,
        kdim=None,
        vdim=None,
        batch_first=False,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                f"num_heads={num_heads} instead"
            )
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError(
                "MultiheadAttention: add_bias_kv and add_zero_attn are not supported yet"
            )
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise ValueError(
                f"embed_dim must be divisible by num_heads (embed_dim={embed_dim}, "
                f"num_heads={num_heads})"
            )
        kw = dict(device=device, dtype=dtype)
        with context(category="parameter"):
            if not self._qkv_same_embed_dim:
                self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, **kw))
                self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, **kw))
                self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, **kw))
                self.register_parameter("in_proj_weight", None)
            else:
                self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, **kw))
                self.register_parameter("q_proj_weight", None)
                self.register_parameter("k_proj_weight", None)
                self.register_parameter("v_proj_weight", None)
            if bias:
                self.in_proj_bias = Parameter(empty(3 * embed_dim, **kw))
            else:
                self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, **kw)
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights=True,
        attn_mask=None,
        average_attn_weights=True,
        is_causal=False,
    ):
        is_batched = query.ndim == 3
        if self.batch_first and is_batched:
            # keep the "is" relations: self-attention projects once
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = (x.transpose(1, 0) for x in (query, key))
                    value = key
            else:
                query, key, value = (x.transpose(1, 0) for x in (query, key, value))
        out, weights = multi_head_attention_forward(
            query,
            key,
            value,
            self.embed_dim,
            self.num_heads,
            self.in_proj_weight,
            self.in_proj_bias,
            self.dropout,
            self.out_proj.weight,
            self.out_proj.bias,
            training=self.training,
            key_padding_mask=key_padding_mask,
            need_weights=need_weights,
            attn_mask=attn_mask,
            use_separate_proj_weight=not self._qkv_same_embed_dim,
            q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight,
            v_proj_weight=self.v_proj_weight,
            average_attn_weights=average_attn_weights,
            is_causal=is_causal,
        )
        if self.batch_first and is_batched:
            return out.transpose(1, 0), weights
        return out, weights

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"


def _get_activation(activation):
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    if callable(activation):
        return activation
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with dropout, a residual and LayerNorm.

    norm_first=False (PyTorch's default) is post-norm: x = norm1(x + sa(x)); x = norm2(x + ff(x)).
    """

    def __init__(
        self,
        d_model,
        nhead,
        dim_feedforward=2048,
        dropout=0.1,
        activation="relu",
        layer_norm_eps=1e-5,
        batch_first=False,
        norm_first=False,
        bias=True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _get_activation(activation)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        src_key_padding_mask = _canonical_mask(
            src_key_padding_mask, "src_key_padding_mask", src._dtype
        )
        src_mask = _canonical_mask(src_mask, "src_mask", src._dtype)
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
        x = self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            is_causal=is_causal,
        )[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout2(x)


class TransformerEncoder(Module):
    """A stack of `num_layers` deep copies of `encoder_layer`, then an optional norm."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True):
        super().__init__()
        self.layers = ModuleList([_clone_module(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        is_causal = _stack_is_causal(self.layers, src, mask, is_causal)
        for layer in self.layers:
            x = layer(
                x,
                src_mask=mask,
                src_key_padding_mask=src_key_padding_mask,
                is_causal=is_causal,
            )
        if self.norm is not None:
            x = self.norm(x)
        return x


class TransformerDecoderLayer(Module):
    """Self-attention, attention over the encoder's memory, and a feed-forward block, each with
    dropout, a residual and LayerNorm (torch's module, post-norm by default)."""

    def __init__(
        self,
        d_model,
        nhead,
        dim_feedforward=2048,
        dropout=0.1,
        activation="relu",
        layer_norm_eps=1e-5,
        batch_first=False,
        norm_first=False,
        bias=True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, batch_first=batch_first, bias=bias, **kw
        )
        self.multihead_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, batch_first=batch_first, bias=bias, **kw
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _get_activation(activation)

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=False,
        memory_is_causal=False,
    ):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(
                self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal
            )
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(
                x
                + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            )
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
        x = self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=False,
        )[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal=False):
        x = self.multihead_attn(
            x,
            mem,
            mem,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=False,
        )[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout3(x)


def _detect_is_causal_mask(mask, is_causal=None, size=None) -> bool:
    """torch's _detect_is_causal_mask: with is_causal unset, a mask equal to the square causal
    mask counts as causal (the comparison mask and its equality are made, as torch's are)."""
    make_causal = is_causal is True
    if is_causal is None and mask is not None:
        sz = size if size is not None else mask.shape[-2]
        causal = generate_square_subsequent_mask(sz, device=mask.device, dtype=mask.dtype)
        if tuple(mask.shape) == tuple(causal.shape):
            make_causal = bool((mask == causal).all())
        else:
            make_causal = False
    return make_causal


def _stack_is_causal(layers, x, mask, is_causal) -> bool:
    """torch's TransformerEncoder / TransformerDecoder: the sequence length (the first layer's
    batch_first says where), then _detect_is_causal_mask."""
    batch_first = layers[0].self_attn.batch_first if len(layers) else False
    seq_len = x.shape[1 if batch_first and x.ndim == 3 else 0]
    return _detect_is_causal_mask(mask, is_causal, seq_len)


class TransformerDecoder(Module):
    """A stack of `num_layers` deep copies of `decoder_layer`, then an optional norm."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = ModuleList([_clone_module(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal=False,
    ):
        output = tgt
        tgt_is_causal = _stack_is_causal(self.layers, tgt, tgt_mask, tgt_is_causal)
        for mod in self.layers:
            output = mod(
                output,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=tgt_is_causal,
                memory_is_causal=memory_is_causal,
            )
        if self.norm is not None:
            output = self.norm(output)
        return output


class Transformer(Module):
    """torch.nn.Transformer: an encoder stack and a decoder stack, each closed by a LayerNorm;
    the weight matrices start Xavier-uniform."""

    def __init__(
        self,
        d_model=512,
        nhead=8,
        num_encoder_layers=6,
        num_decoder_layers=6,
        dim_feedforward=2048,
        dropout=0.1,
        activation="relu",
        custom_encoder=None,
        custom_decoder=None,
        layer_norm_eps=1e-5,
        batch_first=False,
        norm_first=False,
        bias=True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        layer_kw = dict(
            dim_feedforward=dim_feedforward,
            dropout=dropout,
            activation=activation,
            layer_norm_eps=layer_norm_eps,
            batch_first=batch_first,
            norm_first=norm_first,
            bias=bias,
            **kw,
        )
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            encoder_layer = TransformerEncoderLayer(d_model, nhead, **layer_kw)
            encoder_norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
            self.encoder = TransformerEncoder(encoder_layer, num_encoder_layers, encoder_norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            decoder_layer = TransformerDecoderLayer(d_model, nhead, **layer_kw)
            decoder_norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
            self.decoder = TransformerDecoder(decoder_layer, num_decoder_layers, decoder_norm)
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(
        self,
        src,
        tgt,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal=None,
        tgt_is_causal=None,
        memory_is_causal=False,
    ):
        is_batched = src.ndim == 3
        if not self.batch_first and src.shape[1] != tgt.shape[1] and is_batched:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if self.batch_first and src.shape[0] != tgt.shape[0] and is_batched:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal
        )
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        return generate_square_subsequent_mask(sz, device=device, dtype=dtype)


def _clone_module(module: Module) -> Module:
    """copy.deepcopy of a module (torch's _get_clones): its parameters and buffers become new
    tensors (copies), in the order deepcopy meets them."""
    return copy.deepcopy(module)


def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
    """The float causal mask: -inf above the diagonal, 0 elsewhere."""
    from engine.creation import full

    mask = full((sz, sz), float("-inf"), dtype=dtype, device=device)
    if mask._device.type != "meta":
        import numpy as np

        mask._data[np.tril_indices(sz)] = 0.0
    return mask


__all__ = [
    "MultiheadAttention",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "generate_square_subsequent_mask",
    "multi_head_attention_forward",
]
