"""The idiom catalog: one snippet written the ways people write it, pair by pair, each pair
held to one canonical graph and to the same numbers.

Every module is one family of idioms. Each snippet is a tiny model built in code (nothing
is downloaded), written in every framework where the idiom is natural: PyTorch, JAX (plain
functions and Flax linen), TensorFlow / Keras 3, and PyTorch exported with
``torch.onnx.export(..., dynamo=True)`` where the exporter takes it.

- ``test_unpacking``: ``q, k, v = qkv`` against indexing, ``unbind``, ``split``, ``chunk``,
  ``jnp.split``, ``tf.unstack``, ``tf.split``, and GPT-2's split of the features first.
- ``test_contractions``: a linear layer as a layer, ``@``, ``matmul``, ``einsum``,
  ``tensordot``, ``addmm`` (GPT-2's Conv1D), Flax's Dense / DenseGeneral / Einsum, Keras'
  Dense / EinsumDense; attention's two products with ``@`` or ``einsum``.
- ``test_masks``: no mask against masks that keep every key; causal masks (``is_causal``,
  ``tril``, ``triu``, ``arange`` comparisons, a registered buffer, ``make_causal_mask``,
  ``band_part``; -inf, ``finfo.min``, -1e4, -1e9; added or selected); key-padding masks
  built from an ``attention_mask`` input (HF's extended mask, Flax's ``where``, Keras'
  masked softmax, old BERT's -1e4, SDPA's boolean mask). Different fill values part on a
  fully masked row, and stay different.
- ``test_scales``: attention's 1/sqrt(d) given to SDPA, after q·kᵀ, folded into q or k, split
  between them; a mask of zeros; ``/ sqrt(d)`` against ``* d**-0.5``.
- ``test_positions``: position ids as a sliced buffer, ``arange``, ``broadcast_to(arange)``,
  ``tf.range`` or an input; zero token-type ids as a buffer, ``zeros_like``, ``zeros`` or
  ``tf.fill``.
- ``test_layouts``: an NCHW input transposed to NHWC inside (and back at the output), a
  channels-last input, weights in OIHW or HWIO; rescaling and normalization of a
  channels-last input before its first convolution.
- ``test_pooling``: zero padding before a max-pool of a ReLU's output against the pool's own
  padding; global average pooling as a mean, a full-window average pool or
  ``adaptive_avg_pool2d(1)``.
- ``test_rotary``: rotary embeddings from precomputed tables, from ``inv_freq``, as split
  halves, as a NumPy constant (half layout); ``rotate_every_two``, complex multiply, einops
  style (interleaved layout); another theta or layout stays different.
- ``test_constants``: ``1.702`` (QuickGELU) and LayerNorm eps as Python floats or float32;
  GELU tanh against erf, 1.7 against 1.702, eps 1e-6 against 1e-5 stay different.
- ``test_weight_norm``: ``weight_norm`` (parametrization and hook) against ``g * v / ||v||``
  written out in each framework, and Flax's ``WeightNorm``.

Each pair makes two assertions, in two tests, so that each can fail on its own:
``test_canonical_form`` (``catalog.assert_same_canonical``: ``canonicalize_model`` of both
sides gives isomorphic graphs, no opaque node) and ``test_numbers``
(``catalog.assert_same_numbers``: ``specgraph.testing.assert_equivalent(..., mode="numbers")``,
the numbers alone, structure ignored, forward and backward, lhs's weights moved into rhs).
Where two idioms genuinely differ, a ``..._stays_different`` test asserts that specgraph
reports the difference (``catalog.assert_reported_different``).

Where specgraph does not yet hold a pair equivalent, the ``Pair`` says what it does instead,
in one line (``structure=`` for the canonical form, ``numbers=`` for the numbers): the test
is then ``xfail(strict=True)`` with that reason, so the day a change makes it pass it fails
until the reason is deleted. The reasons are the to-do list
(``pytest tests/idioms -rx`` prints it).

To add a pair: write the snippet in the family's module as a ``@side`` function returning
the traced model (``catalog.torch_side``, ``onnx_side``, ``jax_side``, ``linen_side``,
``keras_side``; tiny sizes, seeded weights, the same example inputs as the side it is
compared with), append ``Pair(reference, new_side)`` to the module's ``PAIRS``, run the
module, and where a test fails because specgraph falls short (not because the snippets
differ), give the pair ``structure=`` / ``numbers=`` saying which op or finding differs. A
side traces once per session however many pairs use it; the whole catalog should stay near
a minute on two cores (mark anything slow ``pytest.mark.slow``).
"""
