-- TARGET_INFO_GPU keyed by `deviceId`, with no `id` column (the export that made
-- gpuperf stop with "no such column: id"), beside TARGET_INFO_CUDA_GPU.
CREATE TABLE TARGET_INFO_GPU (deviceId INTEGER NOT NULL, name TEXT NOT NULL,
  busLocation TEXT NOT NULL, totalMemory INTEGER NOT NULL);
INSERT INTO TARGET_INFO_GPU VALUES (0, 'Quadro RTX 6000', '0000:3b:00.0', 25769803776);
CREATE TABLE TARGET_INFO_CUDA_GPU (deviceId INTEGER NOT NULL, name TEXT NOT NULL,
  computeCapabilityMajor INTEGER NOT NULL, computeCapabilityMinor INTEGER NOT NULL);
INSERT INTO TARGET_INFO_CUDA_GPU VALUES (0, 'Quadro RTX 6000', 7, 5);
