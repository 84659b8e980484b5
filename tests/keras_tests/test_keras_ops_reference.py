"""``keras.ops`` against values recorded from Keras 3 (TensorFlow backend): image resizing and
projective transforms (every fill mode), conv_transpose padding rules, attention, losses,
normalizations, quantiles and segment ops. The calls below were run once in the benchmark venv
(``~/.cache/tensorweave/bench-tf-venv``, Keras 3.15.1); their results are in ``keras_ops_reference.py``."""
import numpy as np
import pytest

from tensorweave import keras
from tests.keras_tests.keras_ops_reference import REFERENCE


def reference_calls(o):
    """The recorded calls, on the ``keras.ops`` module ``o``."""
    x = np.arange(2*5*4*1,dtype='float32').reshape(2,5,4,1)/10
    R = {}
    R['resize_bil']=o.image.resize(x,(3,6)).numpy()[1,:,:,0]
    R['resize_near']=o.image.resize(x,(3,7),interpolation='nearest').numpy()[1,:,:,0]
    t=np.array([[0.9,-0.2,0.5,0.3,1.1,-0.4,0.01,-0.02]],'float32')
    for fm in ['constant','nearest','reflect','wrap']:
      for it in ['bilinear','nearest']:
        R['affine_'+fm+'_'+it]=o.image.affine_transform(x[:1], t, interpolation=it, fill_mode=fm, fill_value=-1.0).numpy()[0,:,:,0]
    R['gray']=o.image.rgb_to_grayscale(np.arange(12,dtype='float32').reshape(1,2,2,3)).numpy()
    R['hsv']=o.image.rgb_to_hsv(np.array([[[[0.2,0.5,0.9],[0.9,0.1,0.3]]]],'float32')).numpy()
    R['patches']=o.image.extract_patches(np.arange(16,dtype='float32').reshape(1,4,4,1), 2).numpy()
    R['d2s']=o.depth_to_space(np.arange(32,dtype='float32').reshape(1,2,1,16), 2).numpy()
    R['s2d']=o.space_to_depth(np.arange(32,dtype='float32').reshape(1,4,2,4), 2).numpy()
    R['rmsn']=o.rms_normalization(np.array([[1.,2.,3.]],'float32')).numpy()
    R['ln']=o.layer_normalization(np.array([[1.,2.,4.]],'float32')).numpy()
    R['normalize']=o.normalize(np.array([[3.,4.]],'float32')).numpy()
    R['bce']=o.binary_crossentropy(np.array([1.,0.]), np.array([0.7,0.2])).numpy()
    R['cce']=o.categorical_crossentropy(np.array([[0.,1.,0.]]), np.array([[0.2,0.5,0.3]])).numpy()
    R['scce']=o.sparse_categorical_crossentropy(np.array([1]), np.array([[0.2,0.5,0.3]])).numpy()
    rng=np.random.default_rng(0)
    xi=rng.standard_normal((1,3,3,2)).astype('float32'); k=rng.standard_normal((3,3,4,2)).astype('float32')
    R['ct_same_op']=o.conv_transpose(xi, k, strides=2, padding='same', output_padding=1).numpy()
    R['ct_valid']=o.conv_transpose(xi, k, strides=2, padding='valid').numpy()
    R['ct_same']=o.conv_transpose(xi, k, strides=2, padding='same').numpy()
    R['erfinv']=o.erfinv(np.array([-0.9,0.1,0.5,0.99])).numpy()
    R['hard_sigmoid']=o.hard_sigmoid(np.array([-4.,-1.,0.,2.,5.],'float32')).numpy()
    R['gelu']=o.gelu(np.array([-1.,0.5,2.],'float32')).numpy()
    R['gelu_exact']=o.gelu(np.array([-1.,0.5,2.],'float32'), approximate=False).numpy()
    R['celu']=o.celu(np.array([-1.,0.5],'float32'), alpha=2.).numpy()
    R['log_sigmoid']=o.log_sigmoid(np.array([-1.,0.5],'float32')).numpy()
    R['selu']=o.selu(np.array([-1.,0.5],'float32')).numpy()
    R['psnr']=np.asarray(o.psnr(np.array([[0.1,0.5]],'float32'), np.array([[0.2,0.4]],'float32'), 1.0))
    q=rng.standard_normal((2,3,2,4)).astype('float32'); kk=rng.standard_normal((2,5,2,4)).astype('float32'); v=rng.standard_normal((2,5,2,4)).astype('float32')
    R['dpa']=o.dot_product_attention(q,kk,v).numpy()
    R['dpa_mask']=o.dot_product_attention(q,kk,v, mask=np.tril(np.ones((3,5),bool))[None,None]).numpy()
    R['dpa_causal']=o.dot_product_attention(q,kk[:, :3],v[:, :3], is_causal=True).numpy()
    R['multi_hot']=o.multi_hot(np.array([[0,2],[1,1]]), 4).numpy()
    R['quantile']=o.quantile(np.array([[1.,5.,2.,8.],[3.,3.,1.,0.]]), [0.3,0.5], axis=1).numpy()
    R['median']=o.median(np.array([[1.,5.,2.,8.],[3.,3.,1.,0.]]), axis=0, keepdims=True).numpy()
    R['moments']=np.stack(o.moments(np.array([[1.,5.],[2.,8.]],'float32'), axes=[0]))
    R['bn']=o.batch_normalization(np.array([[1.,5.],[2.,8.]],'float32'), np.array([1.,2.]), np.array([4.,9.]), axis=-1, offset=np.array([0.5,0.]), scale=np.array([2.,1.])).numpy()
    R['seg_max']=o.segment_max(np.array([1.,5.,2.,7.]), np.array([0,0,2,2]), num_segments=3).numpy()
    R['in_top_k']=o.in_top_k(np.array([1,0]), np.array([[0.1,0.6,0.3],[0.5,0.2,0.3]]), 1).numpy()
    R['extract_sequences']=o.extract_sequences(np.arange(10.), 4, 3).numpy()
    R['adaptive_avg']=o.adaptive_average_pool(o.convert_to_tensor(np.arange(70, dtype='float32').reshape(2,5,7,1)), (2,3)).numpy()
    R['adaptive_max']=o.adaptive_max_pool(o.convert_to_tensor(np.arange(70, dtype='float32').reshape(2,5,7,1)), (2,3)).numpy()
    R['correlate_full']=o.correlate(np.array([1.,2.,3.,4.]), np.array([0.,1.,0.5]), mode='full').numpy()
    R['correlate_same']=o.correlate(np.array([1.,2.,3.,4.]), np.array([0.,1.,0.5]), mode='same').numpy()
    return R


_RESULTS = {}


def _results():
    if not _RESULTS:
        _RESULTS.update(reference_calls(keras.ops))
    return _RESULTS


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_matches_keras(name):
    got = np.asarray(_results()[name], dtype=np.float64)
    want = REFERENCE[name]
    assert got.shape == want.shape, f"{name}: shape {got.shape}, Keras {want.shape}"
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=name)


def test_sparsemax_projects_onto_the_simplex():
    # Keras 3.15's TF backend returns zeros here (a bug); the sparsemax definition gives these values
    out = keras.ops.sparsemax(np.array([[0.5, 1.2, -0.3, 1.0]], "float32")).numpy()
    np.testing.assert_allclose(out, [[0.0, 0.6, 0.0, 0.4]], atol=1e-6)
