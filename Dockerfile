# motley in a container: Debian 12, the packages scripts/setup.sh installs, a Release build
# without tests, and motley as the entrypoint. docs/exports.md, "The container", says how it
# fits with the Kubernetes and Slurm exports and motley launch.
#
#   docker build -t motley .
#   docker run --rm motley plan --model llama-3-8b --cluster h100x16
#   docker run --rm -v "$PWD:/work" -w /work motley export megatron --plan plan.json
FROM debian:12

# The packages first, in a layer of their own: source changes do not reinstall them.
COPY scripts/setup.sh /opt/motley/scripts/setup.sh
RUN /opt/motley/scripts/setup.sh && rm -rf /var/lib/apt/lists/*

COPY . /opt/motley
RUN cmake -S /opt/motley -B /opt/motley/build -DCMAKE_BUILD_TYPE=Release \
      -DMOTLEY_BUILD_TESTS=OFF -DMOTLEY_BUILD_BENCH=OFF \
 && cmake --build /opt/motley/build -j"$(nproc)" \
 && ln -s /opt/motley/build/motley /usr/local/bin/motley

# motley finds motley-run and motley-profile beside its own executable (the link resolves to
# build/), and motley run's default training text in /opt/motley/data.
WORKDIR /work
ENTRYPOINT ["motley"]
CMD ["--help"]
