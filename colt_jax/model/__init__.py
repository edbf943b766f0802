"""The paper's method and nothing else: g (Eq. 1) in `reencoder`, phi (Eq. 4) in `phi`, the SCL loss
and its EMA bank (Eq. 2-3) in `scl`, token-wise augmentation (Sec. 3.4, Eq. 7-8) in `augment`,
post-processing t (Eq. 6) in `postprocess`."""
