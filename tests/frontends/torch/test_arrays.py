"""Comparison arithmetic on the device: PyTorch over DLPack gives the same statistics as
NumPy on the host, for tensors of every framework; on a GPU a whole comparison stays there.

The DLPack path runs on CPU tensors too, so it is tested everywhere; the tests marked
``gpu`` run where PyTorch sees CUDA.
"""

from __future__ import annotations

import numpy as np
import pytest

from specgraph.numeric.arrays import HostArrays
from specgraph.numeric.stats import Tolerance

torch = pytest.importorskip("torch")
jnp = pytest.importorskip("jax.numpy")

from specgraph.frontends.torch.arrays import DeviceArrays, as_torch  # noqa: E402

CUDA = torch.cuda.is_available()


def _pair(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((64, 33)).astype(np.float32)
    b = a + rng.standard_normal(a.shape).astype(np.float32) * 1e-6
    b[3, 7] += 0.5  # one element far off
    return a, b


@pytest.mark.parametrize("kind", ["numpy", "torch", "jax", "tf"])
def test_device_statistics_match_the_host(kind: str) -> None:
    a, b = _pair()
    if kind == "torch":
        rhs = torch.from_numpy(b)
    elif kind == "jax":
        rhs = jnp.asarray(b)
    elif kind == "tf":
        tf = pytest.importorskip("tensorflow")
        rhs = tf.constant(b)
    else:
        rhs = b
    tol = Tolerance(2e-5, 2e-5)
    host, device = HostArrays().measure(a, b, tol), DeviceArrays().measure(a, rhs, tol)
    assert device.mismatch == host.mismatch == 1 / a.size
    assert device.max_abs == pytest.approx(host.max_abs, rel=1e-6)
    assert device.cosine == pytest.approx(host.cosine, rel=1e-7)
    assert device.scale == pytest.approx(host.scale, rel=1e-6)


def _case(kind: str) -> tuple[np.ndarray, np.ndarray]:
    a, b = _pair(1)
    if kind == "nan-alike":  # NaN in the same places on both sides: equal there
        a[2, :3] = b[2, :3] = np.nan
    elif kind == "nan-one-side":
        b[5, 5] = np.nan
    elif kind == "inf":
        a[0, 1] = b[0, 1] = np.inf
        b[0, 2] = -np.inf
    elif kind == "zeros":
        a[:], b[:] = 0.0, 0.0
    elif kind == "empty":
        a, b = a[:0], b[:0]
    elif kind == "int":
        a, b = a.astype(np.int32), (b * 2).astype(np.int32)
    elif kind == "float64":
        a, b = a.astype(np.float64), b.astype(np.float64)
    return a, b


CASES = ["plain", "nan-alike", "nan-one-side", "inf", "zeros", "empty", "int", "float64"]


@pytest.mark.parametrize("kind", CASES)
@pytest.mark.parametrize("tol,floor", [(Tolerance(2e-5, 2e-5), 0.0),
                                       (Tolerance(1e-3, 1e-4), 50.0),
                                       (Tolerance(1e-6, 0.3, absolute=True), 0.0)],
                         ids=["relative", "floor", "absolute"])
def test_every_statistic_on_the_device_is_the_hosts(kind: str, tol: Tolerance,
                                                    floor: float) -> None:
    """The device's statistics, read back together, are the host's for every kind of pair:
    non-finite values alike or not, zeros, empty and integer tensors, a floor, an absolute
    tolerance; and two host arrays are measured on the host."""
    a, b = _case(kind)
    host = HostArrays().measure(a, b, tol, floor)
    arrays = DeviceArrays()
    for device in (arrays.measure(torch.from_numpy(a), jnp.asarray(b), tol, floor)
                   if kind != "float64" else arrays.measure(torch.from_numpy(a),
                                                            torch.from_numpy(b), tol, floor),
                   arrays.measure(a, b, tol, floor)):
        assert (device.lhs_finite, device.rhs_finite, device.shape_differs) == (
            host.lhs_finite, host.rhs_finite, host.shape_differs)
        assert device.mismatch == pytest.approx(host.mismatch, abs=1e-12)
        assert device.diverges == host.diverges
        for field in ("max_abs", "max_rel", "cosine", "scale"):
            assert getattr(device, field) == pytest.approx(getattr(host, field), rel=1e-6,
                                                           abs=1e-12), field


def test_host_arrays_stay_on_the_host_and_host_checks_read_them_there() -> None:
    a, b = _pair()
    arrays = DeviceArrays()
    assert arrays.host(a) is a
    b[1, 1] = np.nan
    assert arrays.finite(a) and not arrays.finite(b) and not arrays.nan_free(b)
    assert arrays.rms(a) == pytest.approx(HostArrays().rms(a), rel=1e-6)
    assert arrays.equal(a, a.copy()) and not arrays.equal(a, b)


def test_device_arrays_see_nonfinite_values_and_shapes() -> None:
    a, b = _pair()
    b[0, 0] = np.nan
    arrays = DeviceArrays()
    stats = arrays.measure(torch.from_numpy(a), torch.from_numpy(b), Tolerance(1e-4, 1e-4))
    assert stats.rhs_finite is False and stats.diverges
    assert not arrays.finite(torch.from_numpy(b)) and arrays.finite(torch.from_numpy(a))
    assert arrays.measure(a, a[:3], Tolerance(1e-4, 1e-4)).shape_differs
    assert arrays.equal(torch.from_numpy(b), torch.from_numpy(b.copy()))


@pytest.mark.parametrize("kind", ["torch", "jax"])
def test_a_finite_pair_takes_the_short_path_and_its_sums_answer_the_checks(kind: str) -> None:
    """Two finite tensors are measured without the masks that NaN and Inf need, to the
    same statistics; inside ``remembering`` the Σx² each measure found answers the finite
    checks and the root mean square that follow (an Inf it saw is still seen); outside, the
    tensors are read again."""
    from specgraph.numeric import stats

    rng = np.random.default_rng(5)
    a = rng.standard_normal((96, 80)).astype(np.float32)
    b = a + rng.standard_normal(a.shape).astype(np.float32) * 1e-5
    wrap = torch.from_numpy if kind == "torch" else jnp.asarray
    x, y = torch.from_numpy(a), wrap(b)
    arrays, tol = DeviceArrays(), Tolerance(2e-5, 1e-6)
    short = arrays.measure(x, y, tol, 0.3)
    masked = DeviceArrays._measure_floats(x.double(), as_torch(y).double(), tol, 0.3)
    for field in ("max_abs", "max_rel", "mismatch", "cosine", "scale"):
        assert getattr(short, field) == pytest.approx(getattr(masked, field), rel=1e-9,
                                                      abs=1e-15), field
    assert 0 < short.mismatch < 1 and (short.lhs_finite, short.rhs_finite) == (True, True)
    with stats.remembering():
        arrays.measure(x, y, tol)
        x[0, 0] = float("nan")  # the measure's sums stand for the values: not read again
        assert arrays.finite(x) and arrays.nan_free(x)
        assert arrays.rms(y) == pytest.approx(float(np.sqrt(np.mean(b.astype(np.float64) ** 2))),
                                              rel=1e-9)
        bad = torch.from_numpy(b.copy())
        bad[3, 3] = float("inf")
        seen = arrays.measure(x.nan_to_num(), bad, tol)
        assert not seen.rhs_finite and not arrays.finite(bad) and arrays.nan_free(bad)
    assert not arrays.finite(x) and not arrays.nan_free(x)  # out here: read


def test_jax_arrays_are_shared_not_copied() -> None:
    x = jnp.arange(12.0).reshape(3, 4)
    t = as_torch(x)
    assert t.data_ptr() == x.unsafe_buffer_pointer()


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="no CUDA device")
def test_golden_pair_compares_on_the_gpu() -> None:
    from specgraph.check import compare
    from specgraph.numeric.options import NumericOptions
    from specgraph.numeric.runner import Context
    from tests.test_golden_equivalence import GOLDEN, _canonical, _variant

    cuda = Context(device="cuda")
    for golden in sorted(GOLDEN):
        lhs, rhs = _canonical("torch", GOLDEN[golden][0]), _variant(golden, "jax")
        report = compare(lhs, rhs, options=NumericOptions(seeds=(0, 1), lhs_context=cuda,
                                                          rhs_context=cuda))
        assert report.equivalent, [f.message for f in report.findings]
        assert report.numeric.lhs_context == "torch cuda,eager,float32"
        assert report.numeric.rhs_context == "jax cuda,eager,float32"


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="no CUDA device")
@pytest.mark.parametrize("dtype", ["tf32", "bfloat16", "float16"])
def test_gpu_precisions_agree_within_their_tolerance(dtype: str) -> None:
    from specgraph.check import compare
    from specgraph.numeric.options import NumericOptions
    from specgraph.numeric.runner import Context
    from tests.test_golden_equivalence import GOLDEN, _canonical

    model = _canonical("torch", GOLDEN["transformer_block"][0])
    options = NumericOptions(lhs_context=Context(device="cuda"),
                             rhs_context=Context(device="cuda", dtype=dtype))
    report = compare(model, model, options=options)
    assert report.equivalent, [f.message for f in report.findings]


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="no CUDA device")
def test_a_host_value_meets_a_device_value_on_the_device() -> None:
    a, b = _pair()
    arrays = DeviceArrays()
    for lhs, rhs in ((a, torch.from_numpy(b).cuda()), (torch.from_numpy(a).cuda(), b)):
        x, y = arrays._pair(lhs, rhs)
        assert x.device.type == y.device.type == "cuda"
        host = HostArrays().measure(a, b, Tolerance(2e-5, 2e-5))
        assert arrays.measure(lhs, rhs, Tolerance(2e-5, 2e-5)).mismatch == host.mismatch


def test_a_host_scalar_meets_a_device_scalar_as_a_scalar() -> None:
    """A 0-d host array against a 0-d tensor is one value against one (NumPy's contiguous
    copy of a scalar is 1-d: the shapes once differed)."""
    host = np.array(2.0, np.float32)
    assert as_torch(host).shape == ()
    stats = DeviceArrays().measure(host, torch.tensor(2.0), Tolerance(1e-5, 1e-6))
    assert not stats.shape_differs and stats.max_abs == 0.0
