-- Nsight Systems 2021.3.1 and later: one TARGET_INFO_GPU, keyed by `id`, which is
-- the CUDA device; compute capability as `computeMajor`; no `cuDevice` yet.
CREATE TABLE TARGET_INFO_GPU (id INTEGER NOT NULL, name TEXT, busLocation TEXT,
  isDiscrete INTEGER, l2CacheSize INTEGER, totalMemory INTEGER, smCount INTEGER,
  computeMajor INTEGER, computeMinor INTEGER);
INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA A10', '0000:17:00.0', 1, 6291456, 23836098560, 72, 8, 6);
