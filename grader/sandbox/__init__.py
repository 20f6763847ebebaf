"""The sandbox around the worker process: who it runs as, what it may see, touch and call.

Student code never runs in the grader's process or as the grader's user (SPEC §8). Every
worker is started in layers, one module each:

* always on (mode ``auto`` refuses to run without them):

  - ``uid`` (:mod:`~grader.sandbox.users`): a dedicated unprivileged uid, one of the users
    ``mutagrade-sandbox-N`` made by ``scripts/setup-sandbox.sh``, one per running worker, so
    killing "every process of the uid" never touches another worker. A grader that is not
    root cannot switch uid: where the kernel allows unprivileged user namespaces, each worker
    gets a user namespace of its own from bubblewrap instead, the ``userns`` layer
    (:mod:`~grader.sandbox.userns`), which stands in for the uid layer and the uid-based
    privacy of the work directory;
  - ``rlimits`` (:mod:`~grader.sandbox.harden`): address space, CPU, file size, open files,
    processes, applied by the worker to itself and its children;
  - ``session`` and ``environment`` (:mod:`~grader.sandbox.process`): a new session whose
    process group, and every process of the uid, is killed at the end; a minimal explicit
    environment with one BLAS thread;
  - ``workdir`` (:mod:`~grader.sandbox.workdir`): a private temporary folder holding a copy of
    the submission's test files;
  - ``output``: the worker's output read with a byte cap and a wall-clock timeout (by
    :mod:`grader.run.runner`, with :class:`~grader.sandbox.base.SandboxLimits`);

* where available (mode ``strict`` refuses to run without them):

  - ``seccomp`` (:mod:`~grader.sandbox.seccomp`): in the worker, no internet, netlink or
    packet sockets, no ptrace, ``process_vm_*``, unshare, no namespace but those a run's test
    process is born in, bpf, io_uring, keyctl, perf_event_open; in each child, an allow-list
    of the system calls a test run needs, everything else refused with EPERM: no new
    processes, no signals to anything but itself;
  - ``bubblewrap`` (:mod:`~grader.sandbox.bubblewrap`): new pid, net, ipc, uts and mount
    namespaces; the system read-only; only the interpreter, the worker's code, the package
    under test and the copy of the submission visible.

The modes, errors, layers and limits are in :mod:`~grader.sandbox.base`.
:func:`~grader.sandbox.process.start_worker` starts a worker under a
:class:`~grader.sandbox.base.SandboxMode`; :func:`~grader.sandbox.status.sandbox_status` says
which layers this machine offers (``mutagrade doctor`` prints
:func:`~grader.sandbox.status.doctor_lines`). The worker applies its share itself, before any
submitted code runs: :func:`~grader.sandbox.harden.harden_worker` once, then
:meth:`~grader.sandbox.harden.ChildHardening.apply` in each forked child; the worker imports
only ``base``, ``seccomp`` and ``harden``, which use the standard library alone.

Nothing is imported here: each name is imported from the module that defines it.
"""
