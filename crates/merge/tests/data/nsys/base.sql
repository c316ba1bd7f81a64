-- What every variant shares: one process (pid 4242), one launch of one kernel on
-- CUDA device 0 called from `main`, in the columns nsys has written since 2020. Each variant file
-- adds the tables that name the GPUs.
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel_v7000'), (2, 'saxpy(float*, float*)'),
  (3, 'main'), (4, '/app/saxpy'), (5, 'cudaLaunchKernel'), (6, '/usr/lib/libcudart.so.11.0');
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
  eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
  returnValue INTEGER NOT NULL, callchainId INTEGER);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES
  (1000, 2000, 0, 4242 * 16777216 + 4242, 7, 1, 0, 1);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
  deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
  correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
  shortName INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
  gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,
  blockZ INTEGER NOT NULL);
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
  (3000, 5000, 0, 1, 7, 7, 4242 * 16777216, 2, 2, 1, 1, 1, 256, 1, 1);
CREATE TABLE CUDA_CALLCHAINS (id INTEGER NOT NULL, symbol INTEGER NOT NULL,
  module INTEGER NOT NULL, unresolved INTEGER, originalIP INTEGER, stackDepth INTEGER NOT NULL);
INSERT INTO CUDA_CALLCHAINS VALUES (1, 5, 6, NULL, 0, 0), (1, 3, 4, NULL, 0, 1);
