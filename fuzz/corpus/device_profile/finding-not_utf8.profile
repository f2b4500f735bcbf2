device: "cpu"
device_name: "\377"
