"""Result dtypes of ``keras.ops``, recorded from Keras 3.15.1 (TensorFlow backend) with
``x = np.array([1, 2], "int32")``.

Where the TensorFlow backend raises (integer inputs of ``sigmoid``, ``softmax``, ``erf``...; bool
``add``) or keeps an integer mean (``moments``), tensorweave follows Keras' JAX backend instead;
the TF backend's answer is noted next to the entry.
"""
CASES = [
    ('mul_f', 'ops.multiply(x, 2.0)', 'float32'),
    ('pow_i', 'ops.power(x,2)', 'int32'),
    ('pow_f', 'ops.power(x,2.)', 'float32'),
    ('exp_i', 'ops.exp(x)', 'float32'),
    ('abs_i8', "ops.abs(np.array([1],'int8'))", 'int8'),
    ('mean_f16', "ops.mean(np.array([1],'float16'))", 'float16'),
    ('var_i', 'ops.var(x)', 'float32'),
    ('prod_i8', "ops.prod(np.array([1],'int8'))", 'int32'),
    ('cumsum_i8', "ops.cumsum(np.array([1],'int8'))", 'int8'),
    ('argmax', 'ops.argmax(x)', 'int32'),
    ('floor_i', 'ops.floor(x)', 'float32'),
    ('round_i', 'ops.round(x)', 'int32'),
    ('sign_i', 'ops.sign(x)', 'int32'),
    ('square_b', 'ops.square(np.array([True]))', 'int32'),
    ('max_b', 'ops.max(np.array([True]))', 'bool'),
    ('clip_f', 'ops.clip(x,0,1.5)', 'float32'),  # TF backend: ERR TypeError
    ('where_f', 'ops.where(x>1, x, 1.5)', 'float32'),
    ('linspace', 'ops.linspace(0,1,3)', 'float32'),
    ('arange_f', 'ops.arange(0,1,0.5)', 'float32'),
    ('eye', 'ops.eye(2)', 'float32'),
    ('floordiv_f', 'ops.floor_divide(x, 2.)', 'float32'),
    ('mod', 'ops.mod(x,2)', 'int32'),
    ('matmul_mix', "ops.matmul(x.reshape(1,2), np.ones((2,1),'float16'))", 'float16'),
    ('dot', 'ops.dot(x,x)', 'int32'),
    ('einsum', "ops.einsum('i,i->',x,x)", 'int32'),
    ('trace_i8', "ops.trace(np.eye(2,dtype='int8'))", 'int32'),
    ('count_nonzero', 'ops.count_nonzero(x)', 'int32'),
    ('nonzero', 'ops.nonzero(x)[0]', 'int32'),
    ('argsort', 'ops.argsort(x)', 'int32'),
    ('bincount', 'ops.bincount(x)', 'int32'),
    ('digitize', 'ops.digitize(x,[1.])', 'int32'),
    ('relu_i', 'ops.relu(x)', 'int32'),
    ('sigmoid_i', 'ops.sigmoid(x)', 'float32'),  # TF backend: ERR InvalidArgumentError
    ('one_hot', 'ops.one_hot(x, 3)', 'float32'),
    ('mean_b', 'ops.mean(np.array([True]))', 'float32'),
    ('std_i64', "ops.std(np.array([1],'int64'))", 'float32'),
    ('median_i', 'ops.median(x)', 'float32'),
    ('quantile_i', 'ops.quantile(x,0.5)', 'float32'),
    ('average_i', 'ops.average(x)', 'float32'),
    ('sqrt_f16', "ops.sqrt(np.array([1],'float16'))", 'float16'),
    ('sqrt_i64', "ops.sqrt(np.array([1],'int64'))", 'float32'),
    ('log_u8', "ops.log(np.array([1],'uint8'))", 'float32'),
    ('neg_u8', "ops.negative(np.array([1],'uint8'))", 'uint8'),  # TF backend: ERR InvalidArgumentError
    ('min_i8', "ops.min(np.array([1],'int8'))", 'int8'),
    ('sum_i64', "ops.sum(np.array([1],'int64'))", 'int64'),
    ('sum_u32', "ops.sum(np.array([1],'uint32'))", 'uint32'),
    ('sum_f16', "ops.sum(np.array([1],'float16'))", 'float16'),
    ('cumprod_b', 'ops.cumprod(np.array([True]))', 'int32'),
    ('full', 'ops.full((2,), 1)', 'float32'),
    ('full_f', 'ops.full((2,), 1.)', 'float32'),
    ('zeros', 'ops.zeros(2)', 'float32'),
    ('ones_like_i', 'ops.ones_like(x)', 'int32'),
    ('arange_i', 'ops.arange(3)', 'int32'),
    ('tri', 'ops.tri(2)', 'float32'),
    ('add_i8_u8', "ops.add(np.array([1],'int8'), np.array([1],'uint8'))", 'int16'),
    ('true_div_i8', "ops.true_divide(np.array([1],'int8'),np.array([1],'int8'))", 'float32'),
    ('arctan2_i', 'ops.arctan2(x,x)', 'float32'),
    ('hypot_i', 'ops.hypot(x,x)', 'float32'),
    ('logaddexp_i', 'ops.logaddexp(x,x)', 'float32'),
    ('maximum_if', 'ops.maximum(x, 1.5)', 'float32'),
    ('maximum_ii', 'ops.maximum(x, 1)', 'int32'),
    ('equal', 'ops.equal(x, 1.5)', 'bool'),
    ('isclose', 'ops.isclose(x, x)', 'bool'),
    ('reciprocal_i', 'ops.reciprocal(x)', 'float32'),  # TF backend: ERR NotFoundError
    ('tanh_i', 'ops.tanh(x)', 'float32'),
    ('log1p_i8', "ops.log1p(np.array([1],'int8'))", 'float32'),
    ('softmax_i', "ops.softmax(np.array([1,2],'int32'))", 'float32'),  # TF backend: ERR InvalidArgumentError
    ('norm_i', 'ops.norm(x)', 'float32'),
    ('ptp', 'ops.ptp(x)', 'int32'),
    ('outer', "ops.outer(x, np.array([1.],'float16'))", 'float16'),
    ('diff_i8', "ops.diff(np.array([1,2],'int8'))", 'int8'),
    ('cross_i', 'ops.cross(np.array([1,2,3]), np.array([1.,2.,3.]))', 'float64'),
    ('tensordot_mix', "ops.tensordot(x, np.array([1.,2.],'float64'), 1)", 'float64'),
    ('vdot', 'ops.vdot(x,x)', 'int32'),
    ('inner', 'ops.inner(x,x)', 'int32'),
    ('kron', 'ops.kron(x,x)', 'int32'),
    ('correlate_i', 'ops.correlate(x,x)', 'float32'),
    ('append_mix', "ops.append(x, np.array([1.],'float16'))", 'float16'),
    ('concat_mix', "ops.concatenate([x, np.array([1.],'float16')])", 'float16'),
    ('stack_mix', "ops.stack([np.array([1],'int8'), np.array([1],'uint8')])", 'int16'),
    ('square_u8', "ops.square(np.array([1],'uint8'))", 'uint8'),
    ('trunc_i', 'ops.trunc(x)', 'int32'),
    ('ceil_i', 'ops.ceil(x)', 'float32'),
    ('exp2_i', 'ops.exp2(x)', 'float32'),
    ('logspace', 'ops.logspace(0,1,3)', 'float32'),
    ('cbrt_i', 'ops.cbrt(x)', 'float32'),
    ('deg2rad_i', 'ops.deg2rad(x)', 'float32'),
    ('sinc_i', 'ops.sinc(x)', 'float32'),
    ('nan_to_num_i', 'ops.nan_to_num(x)', 'int32'),
    ('log_softmax_i', "ops.log_softmax(np.array([1,2],'int32'))", 'float32'),  # TF backend: ERR InvalidArgumentError
    ('moments_i', 'ops.moments(x, 0)[0]', 'float32'),  # TF backend: int32
    ('logsumexp_i', 'ops.logsumexp(x)', 'float32'),  # TF backend: ERR InvalidArgumentError
    ('erf_i', 'ops.erf(x)', 'float32'),  # TF backend: ERR InvalidArgumentError
    ('rsqrt_i', 'ops.rsqrt(x)', 'float32'),  # TF backend: ERR InvalidArgumentError
    ('top_k_i', 'ops.top_k(x,1)[1]', 'int32'),
    ('segment_sum_i', 'ops.segment_sum(x, np.array([0,1]))', 'int32'),
    ('cast', "ops.cast(x, 'float16')", 'float16'),
    ('det_i', "ops.det(np.eye(2,dtype='int32'))", 'float32'),  # TF backend: ERR InvalidArgumentError
    ('inv_i', "ops.inv(np.eye(2,dtype='int32'))", 'float32'),  # TF backend: ERR InvalidArgumentError
    ('solve_i', "ops.solve(np.eye(2,dtype='int32'), np.ones((2,1),'int32'))", 'float32'),  # TF backend: ERR InvalidArgumentError
    ('histogram', 'ops.histogram(np.array([1.,2.]))[0]', 'int32'),  # TF backend: float64
    ('mean_i8', "ops.mean(np.array([1],'int8'))", 'float32'),
    ('var_f16', "ops.var(np.array([1.],'float16'))", 'float16'),
    ('max_u8', "ops.max(np.array([1],'uint8'))", 'uint8'),
    ('repeat_i8', "ops.repeat(np.array([1],'int8'),2)", 'int8'),
    ('take_i', 'ops.take(x, 0)', 'int32'),
    ('sort_b', 'ops.sort(np.array([True,False]))', 'bool'),
    ('heaviside_i', 'ops.heaviside(x, x)', 'float32'),
    ('fmod_i8', "ops.fmod(np.array([1],'int8'), np.array([1],'int8'))", 'int8'),
    ('gcd', 'ops.gcd(x,x)', 'int32'),
    ('left_shift', 'ops.left_shift(x, 1)', 'int32'),
    ('bitwise_and_b', 'ops.bitwise_and(np.array([True]), np.array([False]))', 'bool'),  # TF backend: ERR InvalidArgumentError
    ('quantile_i8', "ops.quantile(np.array([1],'int8'),0.5)", 'float32'),
    ('average_w', "ops.average(x, weights=np.array([1.,1.],'float16'))", 'float16'),
    ('sum_b', 'ops.sum(np.array([True]))', 'int32'),
    ('add_b_b', 'ops.add(np.array([True]), np.array([True]))', 'bool'),  # TF backend: ERR InvalidArgumentError
    ('mul_b_b', 'ops.multiply(np.array([True]), np.array([True]))', 'bool'),  # TF backend: ERR InvalidArgumentError
    ('sub_i_f', "ops.subtract(np.array([1],'int64'), np.array([1.],'float16'))", 'float16'),
    ('divide_f16_i', "ops.divide(np.array([1.],'float16'), np.array([1],'int64'))", 'float16'),
    ('identity', 'ops.identity(2)', 'float32'),
    ('linspace_i', 'ops.linspace(np.int32(0),np.int32(4),5)', 'float32'),
]
