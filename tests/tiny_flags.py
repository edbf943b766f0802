"""Flagfile texts of tiny g and phi trainings (seconds on CPU) for end-to-end tests."""


def scl_flags(dataset: str) -> str:
  """g: 2 steps of 4 queries x 8 photos, an active residual (beta 0.5, lr 1e-3)."""
  return (f'--dataset={dataset}\n--beta=0.5\n--learning_rate=1e-3\n--batch_size=4\n'
          '--images_per_query=8\n--num_steps=2\n--checkpoint_every=100\n')


def ttc_flags(dataset: str, num_images: int = 40, *extra: str) -> str:
  """phi of colt-pairs (query-relative tokens): one layer of width 16, 2 steps; `extra` flag
  lines (e.g. '--label_scheme=local')."""
  lines = [f'--dataset={dataset}', '--num_layers=1', '--num_heads=2', '--model_dim=16',
           f'--num_images={num_images}', '--learning_rate=1e-3', '--batch_size=4',
           '--method=colt-pairs', '--query_relative', *extra, '--num_steps=2',
           '--checkpoint_every=100']
  return '\n'.join(lines) + '\n'
