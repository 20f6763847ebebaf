# The mutagrade image: the API (`mutagrade serve`) and the Celery workers (`mutagrade worker`),
# one image for all, started by docker-compose.yml with different commands.
#
#   docker build -t mutagrade:cpu .                                  # torch from the CPU index
#   docker build -t mutagrade:cuda --build-arg TORCH_INDEX_URL= .    # torch from PyPI (CUDA)
#
# The checkout is installed editable into /app: the grader finds the reference, the mutants and
# the goldens beside its code (grader.core.paths.default_layout).
FROM python:3.11-slim

# CPU wheels by default (a tenth of the size); empty = PyPI's build, which carries CUDA.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    OPENBLAS_NUM_THREADS=1 \
    OMP_NUM_THREADS=1 \
    MKL_NUM_THREADS=1 \
    MUTAGRADE_DATABASE_URL=sqlite:////data/mutagrade.db

WORKDIR /app

# The sandbox's system side (SPEC §8): bubblewrap, libseccomp, setpriv, and the unprivileged
# users student code runs as. Its own layer: it changes far less often than the code.
COPY scripts/setup-sandbox.sh scripts/setup-sandbox.sh
RUN bash scripts/setup-sandbox.sh && rm -rf /var/lib/apt/lists/*

# torch first and alone (the largest layer), pinned as pyproject.toml pins it.
RUN if [ -n "$TORCH_INDEX_URL" ]; then \
        pip install "torch==2.13.0" --index-url "$TORCH_INDEX_URL"; \
    fi

COPY . /app
RUN pip install -e '.[torch,service]' \
    && useradd --system --create-home --uid 10001 --shell /usr/sbin/nologin mutagrade \
    && mkdir -p /data && chown mutagrade:mutagrade /data \
    && chmod -R o+rX /app

# The API runs unprivileged. The workers are started as root by docker-compose.yml (user: root)
# because the sandbox switches every grading run to one of the sandbox users, which only root
# may do; student code itself never runs as root or as this user.
USER mutagrade
VOLUME ["/data"]
EXPOSE 8000
CMD ["mutagrade", "serve", "--host", "0.0.0.0", "--port", "8000"]
