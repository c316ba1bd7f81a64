-- Later exports: TARGET_INFO_GPU's `id` is Nsight's own GPU number, and
-- TARGET_INFO_CUDA_DEVICE says which GPU each process sees as which CUDA device
-- (here pid 4242 sees GPU 1 as CUDA device 0, as with CUDA_VISIBLE_DEVICES=1).
CREATE TABLE TARGET_INFO_GPU (id INTEGER NOT NULL, name TEXT, busLocation TEXT,
  uuid TEXT, smCount INTEGER, computeMajor INTEGER, computeMinor INTEGER);
INSERT INTO TARGET_INFO_GPU VALUES
  (0, 'NVIDIA H100 80GB HBM3', '0000:18:00.0', 'GPU-aaaa', 132, 9, 0),
  (1, 'NVIDIA L40S', '0000:2a:00.0', 'GPU-bbbb', 142, 8, 9);
CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER NOT NULL, cudaId INTEGER NOT NULL,
  pid INTEGER NOT NULL, uuid TEXT, numMultiprocessors INTEGER);
INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (1, 0, 4242, 'GPU-bbbb', 142);
