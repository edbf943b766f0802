"""Plumbing every other room uses: errors, owned outputs and manifests, atomic writes, CLI
set-up, flag checks, numerics, devices, and the process settings for XLA on a CPU host."""
