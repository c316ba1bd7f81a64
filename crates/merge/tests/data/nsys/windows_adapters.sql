-- A Windows export: TARGET_INFO_GPU lists every display adapter, the non-CUDA
-- ones with CUDA device 0 and no compute capability. The CUDA GPU is not last.
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT,
  busLocation TEXT, isDiscrete INTEGER, smCount INTEGER, luid INTEGER, cuDevice INTEGER,
  computeMajor INTEGER, computeMinor INTEGER);
INSERT INTO TARGET_INFO_GPU VALUES
  (0, 0, 'Intel(R) UHD Graphics 630', '0000:00:02.0', 0, 0, 1001, 0, 0, 0),
  (0, 1, 'NVIDIA GeForce RTX 3080', '0000:01:00.0', 1, 68, 1002, 0, 8, 6),
  (0, 2, 'Microsoft Basic Render Driver', '', 0, 0, 1003, 0, 0, 0);
