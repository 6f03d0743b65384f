"""XOR + linear regression in plain JAX; `forgot_activation` drops the ReLU (see model_torch.py)."""

import jax
import jax.numpy as jnp
import numpy as np

# The four XOR corners: the example batch the factories hand to a tracer.
CORNERS = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=np.float32)


def init_params(hidden: int = 8, seed: int = 0) -> dict:
    """Seeded weights laid out as Flax does: kernel [in, out], bias [out]."""
    rng = np.random.default_rng(seed)

    def dense(d_in: int, d_out: int) -> dict:
        bound = 1.0 / np.sqrt(d_in)
        return {"kernel": rng.uniform(-bound, bound, (d_in, d_out)).astype(np.float32),
                "bias": rng.uniform(-bound, bound, (d_out,)).astype(np.float32)}

    return {"hidden": dense(2, hidden), "head": dense(hidden, 2)}


def make_apply(activation: bool = True):
    """The model as a function of its parameters: hidden layer, ReLU (if any), head."""

    def apply(params: dict, x: jax.Array) -> dict:
        with jax.named_scope("hidden"):
            h = x @ params["hidden"]["kernel"] + params["hidden"]["bias"]
        if activation:  # forgot_activation() skips this: the model is then linear
            with jax.named_scope("act"):
                h = jax.nn.relu(h)
        with jax.named_scope("head"):
            out = h @ params["head"]["kernel"] + params["head"]["bias"]
        return {"xor_logit": out[:, 0], "regression": out[:, 1]}

    return apply


def correct():
    """The model as specified: hidden layer, ReLU, head."""
    return make_apply(activation=True), init_params(), (jnp.asarray(CORNERS),)


def forgot_activation():
    """Same weights, but the apply function never applies the ReLU."""
    return make_apply(activation=False), init_params(), (jnp.asarray(CORNERS),)
