cpu = 1000
datacenters = ["*"]
gpus = 0
memory = 1024
node_pool = "default"
pool = "cpu"
runner_command = "/usr/local/bin/mediajobs"
