# fedhet — build, test, benchmark.  `make help` lists the targets.
CC       ?= mpicc
ifeq ($(origin CC),default)
CC        = mpicc
endif
DEBUG    ?= 0
# The instruction set our own code is compiled for. The default runs on any x86-64 node of the last 15 years
# (SSE4.2, POPCNT): a binary built on a login node must not die with an illegal instruction on older compute
# nodes. OpenBLAS (and oneDNN) pick their kernels for the CPU at run time whatever this says.
# `make ARCH=native` builds for this machine's CPU only.
ARCH     ?= x86-64-v2
ifneq ($(filter test-sanitizers,$(MAKECMDGOALS)),)
override DEBUG = 1
endif
PYTHON   ?= python3

# Every Debian package the project needs; `make deps` installs the missing ones.
DEPS_PKGS  = libopenmpi-dev openmpi-bin libopenblas-dev libhdf5-openmpi-dev hdf5-tools librandom123-dev \
             libinih-dev zlib1g-dev gnuplot-nox dataset-fashion-mnist pkg-config \
             slurm-wlm munge python3 python3-torch python3-h5py python3-numpy clang libclang-rt-dev libdnnl-dev \
             libopenblas-openmp-dev libonnx-dev libprotobuf-c-dev protobuf-c-compiler python3-onnx python3-torchvision \
             libonnx-testdata help2man libjpeg-dev libpng-dev libswscale-dev libzip-dev python3-pil \
             libdeflate-dev
BENCH_PKGS = python3-torch python3-numpy

# image sources (src/data/imgdecode.c, imgsource.c): libjpeg-turbo, libpng, libswscale, libzip
IMG_CFLAGS := $(shell pkg-config --cflags libpng libswscale libzip 2>/dev/null)
IMG_LIBS   := $(shell pkg-config --libs libpng libswscale libzip 2>/dev/null) -ljpeg
HDF5_CFLAGS := $(shell pkg-config --cflags hdf5-openmpi 2>/dev/null)
HDF5_LIBS   := $(shell pkg-config --libs hdf5-openmpi 2>/dev/null)
# OpenBLAS's OpenMP build where installed (Debian's libopenblas-openmp-dev): OpenBLAS and oneDNN then share
# one OpenMP thread pool. Beside the pthread build, each pool spins on the cores while the other works, and
# two threads run no faster than one. The run path makes the loader pick it over the system's default.
comma := ,
BLAS_OMP_PC := $(firstword $(wildcard /usr/lib/*/openblas-openmp/pkgconfig))
BLAS_PKG     = PKG_CONFIG_PATH=$(BLAS_OMP_PC) pkg-config
BLAS_CFLAGS := $(shell $(BLAS_PKG) --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell $(BLAS_PKG) --libs openblas 2>/dev/null) \
               $(if $(BLAS_OMP_PC),-Wl$(comma)-rpath$(comma)$(shell $(BLAS_PKG) --variable=libdir openblas))

ifeq ($(DEBUG),1)
# UBSan aborts (no recovery), so that undefined behaviour fails the test that meets it; -O1, as ASan's
# documentation advises for speed (test_models' Fashion-MNIST epoch is slow at -O0)
OPTFLAGS = -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else
OPTFLAGS = -O3 -march=$(ARCH) -g
endif
# -fopenmp: `omp simd` (vectorised float reductions, in a fixed order) and the element-wise, pooling and
# normalisation kernels split over train.threads, each output computed by one thread in a fixed order
CFLAGS  += -std=c11 -D_POSIX_C_SOURCE=200809L $(OPTFLAGS) -fopenmp -Wall -Wextra -Wno-unused-parameter \
           -Iinclude -I$(BUILD)/gen $(BLAS_CFLAGS) $(HDF5_CFLAGS) $(IMG_CFLAGS) -MMD -MP
LDFLAGS += $(OPTFLAGS) -fopenmp
# oneDNN (train.backend = onednn) runs on GNU OpenMP, whose thread count nn_set_threads sets
LDLIBS  += $(HDF5_LIBS) $(BLAS_LIBS) $(IMG_LIBS) -ldnnl -lgomp -linih -lprotobuf-c -ldeflate -lz -lm

BUILD   = build
SRC     = $(wildcard src/core/*.c src/nn/*.c src/data/*.c src/algo/*.c src/fl/*.c src/grid/*.c src/analysis/*.c \
                    src/onnx/*.c)
APP_SRC = $(wildcard src/app/*.c)
# ONNX's protobuf schema as Debian ships it (libonnx-dev), compiled by protoc-c at build time
ONNX_PROTO = /usr/include/onnx/onnx.proto
ONNX_GEN   = $(BUILD)/gen/onnx.pb-c.c
OBJ     = $(SRC:%.c=$(BUILD)/%.o) $(ONNX_GEN:.c=.o)
APP_OBJ = $(APP_SRC:%.c=$(BUILD)/%.o)
LIB     = $(BUILD)/libfedhet.a
UNIT_SRC  = $(wildcard tests/unit/test_*.c)
UNIT_BIN  = $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: FORCE prune-stale-tests fuzz fuzz-build check-clang test-sanitizers all deps deps-bench test test-unit run sensitivity quick-results reproduce docs man install bench bench-partition bench-round bench-methods bench-scale bench-sam bench-norm bench-onnx bench-compare clean help check-tools

# test helpers that are not tests themselves (tests/run.sh runs build/tests/test_* only)
TEST_HELPERS = $(BUILD)/tests/model_logits $(BUILD)/tests/onnx_model $(BUILD)/tests/write_ycck
# programs left in build/tests by a unit test since renamed or split: tests/run.sh would run them too
STALE_UNIT_BIN = $(filter-out $(UNIT_BIN),$(patsubst %.d,%,$(wildcard $(BUILD)/tests/test_*)))

all: check-tools bin/fedhet $(UNIT_BIN) $(TEST_HELPERS) prune-stale-tests

prune-stale-tests:
	@rm -f $(STALE_UNIT_BIN) $(STALE_UNIT_BIN:=.d)

help:
	@echo "make deps        install the Debian packages fedhet needs (idempotent)"
	@echo "make             build bin/fedhet and the unit tests for any x86-64 CPU (ARCH=native: this CPU only; DEBUG=1: -O1 -g with sanitizers)"
	@echo "make test        deps + build + every test; ends with 'N passed, N failed, N skipped' (DEBUG=1: under ASan + UBSan)"
	@echo "make test-sanitizers  DEBUG=1 build + the unit tests, tests/mpi/test_run.sh and test_reliability.sh (CI's sanitizer pass)"
	@echo "make run         deps + build + the demo experiment"
	@echo "make sensitivity deps + build + a 3-seed grid on Fashion-MNIST and its report (outputs/sensitivity-fedsam)"
	@echo "make quick-results deps + build + every inputs/*-quick.ini over 3 seeds (outputs/quick-results)"
	@echo "make reproduce CLAIM=T7  one claim of the reproduction study: its grid, report and verdicts (docs/repro/T7)"
	@echo "make bench       engine, partition and round benchmarks -> outputs/bench/*.csv (PyTorch beside them if installed)"
	@echo "make bench-partition / bench-round / bench-methods   one of them (methods: hook overhead over FedAvg)"
	@echo "make bench-sam   SAM-family step cost over the SGD step (targets 2.1x, single-backprop 1.15x)"
	@echo "make bench-scale rank 0 and client ranks' memory, round time outside training, 10 to 10,000 clients"
	@echo "make bench-norm  batch norm and max pooling on the blocked layout: fedhet's kernels against oneDNN's primitives"
	@echo "make bench-onnx  torchvision models as ONNX: fedhet bench against PyTorch, 1 thread -> outputs/bench/onnx.csv"
	@echo "make bench-compare BASE=<commit>   engine steps and the demo round of BASE's build against this tree's, side by side"
	@echo "make deps-bench  install python3-torch for the side-by-side benchmark"
	@echo "make fuzz        build the libFuzzer targets (build-fuzz/) and run each for FUZZ_SECONDS (default 600)"
	@echo "make docs        regenerate docs/configuration.md and docs/methods/methods-table.md from fedhet keys"
	@echo "make man         the man page fedhet(1) from the help texts and fedhet keys -> build/man/fedhet.1"
	@echo "make install PREFIX=~/.local  bin/fedhet, its man page and bash completion under PREFIX (default /usr/local)"
	@echo "make clean       remove build/, build-fuzz/ and bin/"

check-tools:
	@command -v $(CC) >/dev/null 2>&1 || { echo "error: $(CC) not found: run 'make deps' (package libopenmpi-dev)"; exit 1; }
	@test -f /usr/include/Random123/philox.h || { echo "error: Random123 headers missing: run 'make deps' (package librandom123-dev)"; exit 1; }
	@test -n "$(BLAS_LIBS)" || { echo "error: OpenBLAS not found by pkg-config: run 'make deps' (package libopenblas-dev)"; exit 1; }
	@test -n "$(HDF5_LIBS)" || { echo "error: parallel HDF5 not found by pkg-config: run 'make deps' (package libhdf5-openmpi-dev)"; exit 1; }
	@test -f /usr/include/oneapi/dnnl/dnnl.h || { echo "error: oneDNN headers missing: run 'make deps' (package libdnnl-dev)"; exit 1; }
	@test -f $(ONNX_PROTO) || { echo "error: $(ONNX_PROTO) missing: run 'make deps' (package libonnx-dev)"; exit 1; }
	@command -v protoc-c >/dev/null 2>&1 || { echo "error: protoc-c not found: run 'make deps' (package protobuf-c-compiler)"; exit 1; }
	@pkg-config --exists libpng libswscale libzip && test -f /usr/include/jpeglib.h || { echo "error: image libraries missing: run 'make deps' (packages libjpeg-dev libpng-dev libswscale-dev libzip-dev)"; exit 1; }

deps:
	@./tools/install-deps.sh $(DEPS_PKGS)

deps-bench:
	@./tools/install-deps.sh $(BENCH_PKGS)

# The flags every object was built with: when they change (DEBUG=1 or not), everything is rebuilt.
FLAGS_STAMP = $(BUILD)/flags
$(FLAGS_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(CC) $(CFLAGS) $(LDFLAGS)' | cmp -s - $@ || echo '$(CC) $(CFLAGS) $(LDFLAGS)' > $@

# The version and the commit a build comes from (git describe; "unknown" outside a clone): every checkpoint and
# run.h5 records them (code_version), fedhet --version and exported ONNX files show them. Rewritten only when they
# change, so that a build from an unchanged tree stays a no-op.
VERSION = 0.1
VERSION_HEADER = $(BUILD)/gen/version.h
FEDHET_COMMIT := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
VERSION_TEXT = '\#define FEDHET_VERSION "$(VERSION) ($(FEDHET_COMMIT))"\n'
$(VERSION_HEADER): FORCE
	@mkdir -p $(@D)
	@printf $(VERSION_TEXT) | cmp -s - $@ || printf $(VERSION_TEXT) >$@
$(BUILD)/src/fl/checkpoint.o $(BUILD)/src/app/main.o $(BUILD)/src/onnx/export.o: $(VERSION_HEADER)

bin/fedhet: $(APP_OBJ) $(LIB) $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(APP_OBJ) $(LIB) $(LDLIBS)

$(ONNX_GEN): $(ONNX_PROTO)
	@mkdir -p $(@D)
	protoc-c --c_out=$(@D) -I$(<D) $<
$(ONNX_GEN:.c=.h): $(ONNX_GEN)
# explicit targets (a pattern rule without a recipe would add no prerequisite): the generated header first
ONNX_SRC = $(wildcard src/onnx/*.c)
$(ONNX_SRC:%.c=$(BUILD)/%.o): $(ONNX_GEN:.c=.h)
$(ONNX_GEN:.c=.o): $(ONNX_GEN) $(FLAGS_STAMP)
	$(CC) $(CFLAGS) -Wno-unused-parameter -c -o $@ $<

# made afresh, so that the object of a source since renamed or removed does not stay in it
$(LIB): $(OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	ar rcs $@ $^

# The element-wise kernels' math (GELU's exp and erf, softmax, layer norm, the exact sums' window check) vectorises
# only where a comparison or a square root may run speculatively: neither flag changes a result bit (no
# reassociation, IEEE sqrt either way)
$(BUILD)/src/nn/kernels_elementwise.o $(BUILD)/src/nn/kernels_nd.o $(BUILD)/src/nn/kernels_isa.o: CFLAGS += -fno-trapping-math -fno-math-errno
$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(LIB) $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

# test_round_alloc counts every allocation the library makes: its calls are redirected to the test's counters
# at link time (and fl_fault_point, whose calls mark the rounds)
ALLOC_WRAP = malloc calloc realloc aligned_alloc posix_memalign strdup strndup fl_fault_point
$(BUILD)/tests/test_round_alloc: LDFLAGS += $(ALLOC_WRAP:%=-Wl,--wrap=%)

$(BUILD)/tests/model_logits $(BUILD)/tests/onnx_model $(BUILD)/tests/write_ycck: $(BUILD)/tests/%: tests/mpi/%.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

# `make test` alone works on a fresh machine: deps first, then a separate make for the build
# (pkg-config results above are read at parse time, before deps could install anything).
test: deps
	@$(MAKE) --no-print-directory all fuzz-build
	@./tests/run.sh

test-unit: all
	@./tests/run.sh

# CI's sanitizer pass (always DEBUG=1): every unit test and the MPI scripts of the runtime end to end and of its
# failure handling (full disk, locks, damaged files: mostly one rank)
test-sanitizers: all
	@./tests/run.sh build/tests/test_* tests/mpi/test_run.sh tests/mpi/test_reliability.sh

run: deps
	@$(MAKE) --no-print-directory all
	@./tools/demo.sh

# the generated pages (tools/gen-docs.py): the configuration reference and the methods table, from
# bin/fedhet's own tables (fedhet keys); tests/system/test_docs.sh fails when they are out of date
docs: bin/fedhet
	@$(PYTHON) tools/gen-docs.py

# the man page, from the help texts (help2man), and `make install`: the executable, the man page and the bash
# completion (tools/fedhet-completion.bash, which reads keys and methods from the installed fedhet at run time)
PREFIX ?= /usr/local
man: $(BUILD)/man/fedhet.1
$(BUILD)/man/fedhet.1: bin/fedhet tools/gen-man.sh
	@mkdir -p $(@D)
	@./tools/gen-man.sh bin/fedhet $@
install: bin/fedhet $(BUILD)/man/fedhet.1
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 755 bin/fedhet $(DESTDIR)$(PREFIX)/bin/fedhet
	install -m 644 $(BUILD)/man/fedhet.1 $(DESTDIR)$(PREFIX)/share/man/man1/fedhet.1
	install -m 644 tools/fedhet-completion.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/fedhet

# a 3-seed sensitivity grid on Fashion-MNIST (inputs/sensitivity-fedsam.ini) and its report
sensitivity: deps
	@$(MAKE) --no-print-directory all
	@./tools/sensitivity.sh

# one claim of the reproduction study (docs/reproduction.md): its grid (resumed if begun), report and verdicts
reproduce: deps
	@$(MAKE) --no-print-directory all
	@./tools/reproduce.sh $(CLAIM)

# the seed methods' quick configs over 3 seeds each, as grids, and their reports
quick-results: deps
	@$(MAKE) --no-print-directory all
	@./tools/quick-results.sh

bench: all $(BUILD)/bench/sam_step
	@./tests/bench/engine.sh
	@./tests/bench/partition.sh
	@./tests/bench/round.sh
	@./tests/bench/methods.sh
	@./tests/bench/sam.sh

bench-sam: all $(BUILD)/bench/sam_step
	@./tests/bench/sam.sh

bench-onnx: all
	@./tests/bench/onnx.sh

# BASE's build is kept in build/bench-base/<commit> for the next comparison
bench-compare: bin/fedhet
	@BASE="$(BASE)" ./tests/bench/compare.sh

bench-norm: $(BUILD)/bench/norm_step
	@OPENBLAS_NUM_THREADS=1 $(BUILD)/bench/norm_step

$(BUILD)/bench/norm_step: tests/bench/norm_step.c $(LIB) $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/sam_step: tests/bench/sam_step.c $(LIB) $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

bench-partition: all
	@./tests/bench/partition.sh

bench-round: all
	@./tests/bench/round.sh

bench-methods: all
	@./tests/bench/methods.sh

# rank 0's and the client ranks' memory and the round's non-training time as the clients grow (10,000 clients)
bench-scale: all
	@./tests/bench/scale.sh

# ---- fuzzing: clang + libFuzzer + ASan/UBSan over a separately compiled copy of the library -----------
# (mpicc with OMPI_CC=clang: the library includes mpi.h and hdf5.h). tests/fuzz/test_fuzz.sh runs each
# target briefly within `make test`; `make fuzz` runs each for FUZZ_SECONDS.
FUZZ_BUILD   = build-fuzz
FUZZ_CC      = OMPI_CC=clang mpicc
FUZZ_SAN     = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  = -std=c11 -D_POSIX_C_SOURCE=200809L -O1 -g $(FUZZ_SAN) -fopenmp-simd -Wall -Wextra \
               -Wno-unused-parameter -Wno-missing-field-initializers -Wno-pass-failed -Iinclude -I$(BUILD)/gen $(BLAS_CFLAGS) \
               $(HDF5_CFLAGS) $(IMG_CFLAGS) -MMD -MP
FUZZ_TARGETS = config grid idx cifar partfile checkpoint onnx
FUZZ_OBJ     = $(patsubst %.c,$(FUZZ_BUILD)/%.o,$(SRC) $(filter-out src/app/main.c,$(APP_SRC))) $(FUZZ_BUILD)/gen/onnx.pb-c.o
FUZZ_BIN     = $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%) $(FUZZ_BUILD)/fuzz_seeds
FUZZ_SECONDS ?= 600

fuzz-build: check-tools check-clang $(FUZZ_BIN)

check-clang:
	@command -v clang >/dev/null 2>&1 || { echo "error: clang not found: run 'make deps' (packages clang, libclang-rt-dev)"; exit 1; }

fuzz: deps
	@$(MAKE) --no-print-directory fuzz-build
	@FUZZ_SECONDS=$(FUZZ_SECONDS) ./tests/fuzz/fuzz.sh

$(FUZZ_BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

$(ONNX_SRC:%.c=$(FUZZ_BUILD)/%.o): $(ONNX_GEN:.c=.h)
$(FUZZ_BUILD)/src/fl/checkpoint.o $(FUZZ_BUILD)/src/onnx/export.o: $(VERSION_HEADER)
$(FUZZ_BUILD)/gen/onnx.pb-c.o: $(ONNX_GEN)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

$(FUZZ_BUILD)/libfedhet.a: $(FUZZ_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_seeds: tests/fuzz/seeds.c $(FUZZ_BUILD)/libfedhet.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_BUILD)/libfedhet.a $(LDLIBS)

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_BUILD)/libfedhet.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_BUILD)/libfedhet.a $(LDLIBS)

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) bin

-include $(OBJ:.o=.d) $(APP_OBJ:.o=.d) $(UNIT_BIN:=.d) $(TEST_HELPERS:=.d) $(FUZZ_OBJ:.o=.d) $(FUZZ_BIN:=.d)
