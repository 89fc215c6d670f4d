"""Small-GPU emulation: green-context confinement and the SM count Inductor sees, GPU presets."""
