# tiny hand-written profile for tests: fixed constants, so outputs do not depend on timing
device: "cpu"
device_name: "test CPU"
threads: 2
total_memory_bytes: 1073741824
activation_scale: 1
activation_overhead_bytes: 0
flops_per_second: 1e10
half_rate_rows: 16
layer_overhead_s: 0.0001
backward_factor: 2
