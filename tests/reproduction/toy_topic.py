"""One small topic the diagnostics' tests score: ten photos, p0-p6 one cluster, p7 and p8
one each, p9 irrelevant (topic 7)."""
import types

from colt_jax.data.types import TopicGroundTruth

TOPIC = 7
IDS = tuple(f'p{i}' for i in range(10))


def toy_split():
  """A split-like namespace holding the topic's ground truth alone."""
  gt = TopicGroundTruth(relevance={**{pid: 1 for pid in IDS[:9]}, 'p9': 0},
                        clusters={**{pid: 1 for pid in IDS[:7]}, 'p7': 2, 'p8': 3},
                        cluster_names={1: 'front', 2: 'night', 3: 'inside'}, num_clusters=3)
  return types.SimpleNamespace(ground_truth={TOPIC: gt})
