"""Pure train steps and the pmap training loop shared by the SCL and TTC trainers."""
