-- Nsight Systems 2021.1 to 2021.3.0: the CUDA GPUs in their own table, keyed by
-- the CUDA device (`deviceId`), compute capability as `computeCapabilityMajor`.
CREATE TABLE TARGET_INFO_CUDA_GPU (deviceId INTEGER NOT NULL, name TEXT NOT NULL,
  computeCapabilityMajor INTEGER NOT NULL, computeCapabilityMinor INTEGER NOT NULL,
  numMultiprocessors INTEGER NOT NULL, numThreadsPerWarp INTEGER NOT NULL,
  maxWarpsPerMultiprocessor INTEGER NOT NULL, coreClockRate INTEGER NOT NULL,
  maxIPC INTEGER NOT NULL);
INSERT INTO TARGET_INFO_CUDA_GPU VALUES (0, 'Tesla V100-SXM2-16GB', 7, 0, 80, 32, 64, 1530000, 4);
