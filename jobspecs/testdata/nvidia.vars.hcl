constraints = [{ attribute = "$${attr.kernel.name}", operator = "=", value = "linux" }]
cpu = 500
datacenters = ["dc1", "dc2"]
disk = 300
gpu_count = 2
gpu_min_memory_mb = 8000
gpu_model = "RTX|A[0-9]+"
image = ""
memory = 256
node_pool = "default"
pool = "nvidia"
runner_command = "/opt/media \"jobs\"/$${x}"
sandbox = ""
