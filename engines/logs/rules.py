"""The grammar compiled into rules: what a line whose message starts with a needle means.

A :class:`~servelab.engines.logs.grammar.LogGrammar` (an adapter's data) becomes a flat list of
:class:`Rule`, each with its kind (a stage event, a progress bar, ready, shutdown, fatal, figures,
a setting, a notable warning, an answered request, the server up) and its compiled regex.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from servelab.engines.logs.grammar import STAGES, FatalRule, LogGrammar

__all__ = ["FAILURE_WARNING_NEEDLES", "FATAL_EVIDENCE", "FATAL_THEN", "LATE", "NOTABLE_ANYWHERE", "WARNED", "STAGE_CONTEXT", "Rule", "compile_rules", "to_number"]

#: The kinds of rule.
STAGE, BAR, READY, SHUTDOWN, FATAL, METRIC, SETTING, WARN, SERVED, UP, SERVING_ERROR, FATAL_THEN, WARNED = range(13)
#: Rules read one line at a time only until the run is up (access and figures lines are many; once
#: the run is ready, evidence that it was up tells nothing new).
LATE = (SERVED, METRIC, UP, SERVING_ERROR)

#: The kinds of evidence a root cause rests on, in words (strongest first); see ``RootCause.evidence``.
TRACEBACK = "traceback"
FATAL_RECORD = "fatal record"
NATIVE = "native crash"
DEATH = "process death"
KILLED = "killed by signal 9"
ERROR_LINE = "error line"
#: A launcher naming a dead child: "Process ApiServer_0 (PID: 359) died with exit code 1", "worker
#: exited with exit code 136", "Rank 0 scheduler is dead. Exit code: -6 (SIGABRT)".
_DEATH = (
    r"(?P<message>\S+(?: \((?:PID|pid)[:=] ?\d+\))? (?:died|exited|is dead|crashed|(?:unexpectedly )?failed)\.? (?:with )?(?:an )?[Ee]xit code:? "
    r"(?!-?(?:0|2|15)\b)-?\d+(?: \(SIG[A-Z]+\))?)"
)
#: An exception's repr: ``TypeName('message')``.
#: (a repr printed with ``\n`` escapes or cut by the terminal ends at the first escape or at the line's end)
_REPR = r"(?P<exception>[A-Za-z_][\w.]*(?:Error|Exception))\((?P<q>['\"])(?P<message>.+?)(?:(?P=q)\)|\\n|\s*$)"
#: A C++ runtime's own record (glog / c10: PyTorch, NCCL process groups), error or fatal level:
#: "[rank0]:[E219 12:14:43.351647859 ProcessGroupNCCL.cpp:1595] [PG ID 2 ...] Process group watchdog
#: thread terminated with exception: CUDA error: an illegal memory access was encountered"; before
#: PyTorch 2.2 without the date and time: "[E ProcessGroupNCCL.cpp:916] [Rank 7] NCCL watchdog thread
#: terminated with exception: CUDA error: unknown error"
_CPP_RECORD = r"\[[{lvl}](?:\d{{3,4}} \d\d:\d\d:\d\d\.\d+ (?:\d+ )?| )(?P<where>[\w.-]+\.(?:cpp|cc|cu|h|hpp):\d+)\] (?:\[[^\]]*\] )*"
_CPP_EF = _CPP_RECORD.format(lvl="EF")
#: Fatal evidence without a traceback that any engine on CUDA / NCCL / PyTorch prints, strongest
#: first (``rank``); engine-specific phrases live in each adapter's grammar. A traceback whose
#: exception line is in the window still wins over them; they win over a traceback cut before it.
FATAL_EVIDENCE: tuple[FatalRule, ...] = (
    # a CUDA kernel's device-side assert, printed once per failing thread (the message leaves the
    # block and thread out, so every copy reads the same):
    # ".../Indexing.cu:1289: indexSelectLargeIndex: block: [..], thread: [..] Assertion `srcIndex < srcSelectDimSize` failed."
    FatalRule(
        "Assertion `",
        r"(?:(?:[^\s:]*/)?(?P<where>[\w.-]+:\d+: \w+): .*?)?(?P<message>Assertion `.+` failed)",
        rank=0,
        anywhere=True,
    ),
    # PyTorch's CUDA caching allocator, before it raises (a warning: the allocator may free its cache
    # and retry, so alone it does not fail the run): "[W1201 ...CUDACachingAllocator.cpp:3933] memory
    # allocation failed with OOM on device 1 while trying to allocate 2147483648 bytes (free: ..., total: ...)."
    FatalRule(
        "memory allocation failed with OOM",
        r"(?P<message>memory allocation failed with OOM on device \d+ while trying to allocate \d+ bytes)",
        rank=1,
        anywhere=True,
        weak=True,
    ),
    # ProcessGroupNCCL's watchdog: "[Rank 1] Watchdog caught collective operation timeout:
    # WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=.., Timeout(ms)=600000) ran for 600059 milliseconds before timing out."
    FatalRule(
        "Watchdog caught collective operation timeout",
        # (or to the end of its line, when a terminal wrapped the record before "ran for")
        r"(?P<message>Watchdog caught collective operation timeout(?:: WorkNCCL\((?:.*?(?P<op>OpType=\w+))?.*?\) ran for \d+ milliseconds|.*?(?=\s*$)))",
        rank=2,
        anywhere=True,
    ),
    # ProcessGroupNCCL's watchdog on a collective that failed (the abort follows): "[PG ID 2 PG GUID 3 Rank 7]
    # failure detected by watchdog at work sequence id: 40231 PG status: last enqueued work: ..."
    FatalRule(
        "failure detected by watchdog",
        r"(?P<message>failure detected by watchdog at work sequence id: \d+)",
        rank=2,
        anywhere=True,
    ),
    # the same watchdog in PyTorch 2.6's words, the vague line first, then what it was: "[PG ID 2 PG GUID 3
    # Rank 3] Exception (either an error or timeout) detected by watchdog at work: 32, last enqueued NCCL
    # work: 32, ...", "... Timeout at NCCL work: 32, last enqueued NCCL work: 32, last completed NCCL work:
    # 31.", "[Rank 3] Some NCCL operations have failed or timed out. Due to the asynchronous nature ..."
    FatalRule("Timeout at NCCL work: ", r"(?P<message>Timeout at NCCL work: \d+)", rank=2, anywhere=True),
    FatalRule(
        "detected by watchdog at work: ",
        r"(?P<message>Exception \(either an error or timeout\) detected by watchdog at work: \d+)",
        rank=3,
        anywhere=True,
    ),
    FatalRule("Some NCCL operations have failed or timed out", r"(?P<message>Some NCCL operations have failed or timed out)", rank=3, anywhere=True),
    # a C++ exception nobody caught (SIGABRT follows): "terminate called after throwing an instance of 'c10::DistBackendError'"
    # its "  what():  CUDA error: an illegal memory access was encountered" line says what it was
    FatalRule(
        "terminate called after throwing an instance of",
        r"(?P<message>terminate called after throwing an instance of \S+)",
        rank=3,
        anywhere=True,
        then="what():",
    ),
    # libc++'s report of the same (macOS, Android, clang builds), the exception's type and message on
    # one line: "libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] ..."
    FatalRule(
        "terminating due to uncaught exception of type ",
        r"(?P<message>terminating due to uncaught exception of type (?P<exception>[\w:<>]+)(?:: .*?)?)\s*$",
        rank=3,
        anywhere=True,
        kind=NATIVE,
    ),
    # a C++ exception's message on its own line, when the line that threw it ("terminate called after
    # throwing ...", which takes it as its ``then``) is above the window: "  what():  [PG ID 2 ...]
    # Process group watchdog thread terminated with exception: CUDA error: ..." (the "Exception raised
    # from ..." location after it says where, this says what)
    FatalRule("what():", r"(?:^|\s)what\(\):\s+(?P<message>\S.*?)\s*$", rank=3, anywhere=True),
    # a worker killed by a signal: "Worker VllmWorkerProcess pid 214281 died, exit code: -11" (not SIGTERM /
    # SIGINT, -15 / -2: the worker was told to stop, as on Ctrl-C)
    FatalRule("died, exit code", r"(?P<message>\S+(?: pid \d+)? died, exit code:? -(?!15\b|2\b)\d+)", rank=4, anywhere=True, kind=DEATH),
    # CPython's dump of an exception it could not print (sys.excepthook failed, sys.stderr lost, a fatal
    # error): "object type name: RecursionError", then "object repr     : RecursionError('maximum recursion
    # depth exceeded')", then "lost sys.stderr": the repr names the exception that ended the process
    FatalRule("object repr", r"^object repr\s*: " + _REPR, rank=3),
    # CPython's faulthandler on a native crash: "Fatal Python error: Segmentation fault" (then the
    # thread stacks, "Thread 0x... (most recent call first):", which are not a traceback)
    FatalRule("Fatal Python error: ", r"(?P<message>Fatal Python error: .+)", rank=0, anywhere=True, kind=NATIVE),
    # faulthandler's thread stacks with their "Fatal Python error" header above the window: "Current thread
    # 0x00007f80908e0640 (most recent call first):" (its frames read 'File "...", line 122 in f', no comma)
    FatalRule(
        " (most recent call first):",
        r"(?P<message>(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\)):",
        rank=2,
        anywhere=True,
        kind=NATIVE,
    ),
    # other native crash reports: PyTorch's signal handler ("!!!!!!! Segfault encountered !!!!!!!", then
    # its symbolised frames as File "<unknown>", line 0), abseil's ("*** SIGSEGV received at time=...")
    # and glog/folly's ("*** SIGSEGV (@0x0) received by PID 12 ..."), and the shell's report of a
    # child that died of one ("Segmentation fault (core dumped)", "Aborted (core dumped)")
    FatalRule("Segfault encountered", r"(?P<message>Segfault encountered)", rank=0, anywhere=True, kind=NATIVE),
    # (below faulthandler's "Fatal Python error: ...", which the same crash prints with the Python stacks)
    FatalRule(" received at time=", r"(?P<message>SIG[A-Z]+ received at time=\d+(?: on cpu \d+)?)", rank=1, anywhere=True, kind=NATIVE),
    # LLVM's own fatal error (report_fatal_error, then abort), from a JIT compiler inside the engine
    # (Triton, XLA): "LLVM ERROR: Failed to compute parent layout for slice layout."
    FatalRule("LLVM ERROR: ", r"(?P<message>LLVM ERROR: .+?)\s*$", rank=1, anywhere=True, kind=NATIVE),
    FatalRule(" received by PID ", r"(?P<message>SIG[A-Z]+ \(@0x[0-9a-f]+\) received by PID \d+)", rank=1, anywhere=True, kind=NATIVE),
    # UCX's signal handler (Ray, NIXL, Mooncake, UCC): "... UCX  ERROR   Caught signal 11 (Segmentation fault:
    # address not mapped to object at address (nil))", then its backtrace, frame by frame as "%3d 0x%016lx
    # %s()  %s:%u": "14 0x0000000000004493 ???()  /usr/lib/x86_64-linux-gnu/libffi.so.8:0" (its header above the window)
    FatalRule("Caught signal ", r"(?P<message>Caught signal \d+ \(.*?)\s*$", rank=1, anywhere=True, kind=NATIVE),
    FatalRule("()  ", r"^\s*(?P<message>\d+ 0x[0-9a-fA-F]{16} \S+\(\)  \S+:\d+)\s*$", rank=2, anywhere=True, kind=NATIVE),
    # a C++ exception's native frames (c10's backtrace, after "Exception raised from ..." and its record, both
    # above the window): "frame #23: _PyObject_FastCallDictTstate + 0xd0 (0x5578c75d3f50 in sglang::scheduler_TP0)"
    FatalRule("frame #", r"^\s*(?P<message>frame #\d+: .+ \(0x[0-9a-fA-F]+ in .+\))\s*$", rank=5, anywhere=True),
    FatalRule(
        "(core dumped)",
        r"(?P<message>(?:Segmentation fault|Aborted|Bus error|Illegal instruction|Floating point exception|Trace/breakpoint trap)\s*\(core dumped\))",
        rank=1,
        anywhere=True,
        kind=NATIVE,
    ),
    FatalRule("Segmentation fault", r"^(?:.*\b\d+ )?(?P<message>Segmentation fault)\s*$", rank=1, anywhere=True, kind=NATIVE),
    # ROCm's HSA runtime on a GPU page fault (the process aborts, no Python exception): "Memory access
    # fault by GPU node-1 (Agent handle: 0x3d1bda20) on address 0x7fa18d83f000. Reason: Page not present
    # or supervisor privilege." (CUDA's illegal memory access on AMD)
    FatalRule("Memory access fault by GPU", r"(?P<message>Memory access fault by GPU node-\d+\b.*?)\s*$", rank=1, anywhere=True, kind=NATIVE),
    # CUDA's sticky errors: the context is lost, whatever level the line that says so is at ("WARNING
    # ... Failed to pickle inputs of failed execution: CUDA error: an illegal memory access was encountered");
    # below every other record (an exception's repr or a C++ record on the same line names more)
    FatalRule(
        "CUDA error: ",
        r"(?P<message>CUDA error: (?:an illegal memory access was encountered|device-side assert triggered|unspecified launch failure|"
        r"an illegal instruction was encountered|misaligned address|uncorrectable ECC error encountered))",
        rank=7,
        anywhere=True,
    ),
    # the CUDA runtime's advice line that ends a CUDA error's message (the error's own line may be above
    # the window): "Search for `cudaErrorAssert' in https://docs.nvidia.com/cuda/... for more information."
    FatalRule("Search for `cudaError", r"(?P<message>Search for `cudaError\w+' in \S+ for more information\.?)", rank=7, anywhere=True),
    FatalRule(
        "HIP error: ",
        r"(?P<message>HIP error: (?:an illegal memory access was encountered|device-side assert triggered|unspecified launch failure))",
        rank=7,
        anywhere=True,
    ),
    # the shell's report of a child killed by SIGKILL (the kernel's OOM killer is the usual sender)
    FatalRule("Killed", r"^(?P<message>Killed)\s*$", rank=4, anywhere=True, kind=KILLED),
    # a launcher naming a dead child: "Process ApiServer_0 (PID: 359) died with exit code 1",
    # "worker exited with exit code 136"; "Engine core proc EngineCore_DP0 died unexpectedly"
    # (a stop's own code, 0 / 2 / 15 / -2 / -15, is not a death: the process was told to stop)
    FatalRule(" exit code", _DEATH, rank=4, anywhere=True, kind=DEATH),
    FatalRule(" Exit code", _DEATH, rank=4, anywhere=True, kind=DEATH),
    # a launcher's line of its own for the dead child's code, after the line that named it ("Rank 0
    # scheduler is dead. Please check if there are relevant logs." then "Exit code: -9")
    FatalRule("Exit code: ", r"^(?P<message>Exit code: (?!-?(?:0|2|15)\b)-?\d+(?: \(SIG[A-Z]+\))?)\s*$", rank=4, kind=DEATH),
    FatalRule("died unexpectedly", r"(?P<message>[^,;:\]\[|]*?\S+ died unexpectedly)", rank=4, anywhere=True, kind=DEATH),
    # a front end naming its engine's process as dead, often as an exception's repr on an error record
    # ("ERROR ... RuntimeError('Engine process (pid 76) died.')"): a death, not only an error line
    FatalRule(" process (", r"(?P<message>\S+ process \((?:pid|PID)[:=]? ?\d+\) died\b\.?)", rank=4, anywhere=True, kind=DEATH),
    # systemd's word on a unit's main process ("vllm.service: Main process exited, code=exited,
    # status=1/FAILURE", "code=killed, status=9/KILL"; a clean exit, status 0, is none)
    FatalRule("Main process exited, code=", r"(?P<message>Main process exited, code=\w+, status=(?!0/)\d+/\w+)", rank=4, anywhere=True, kind=DEATH),
    # Ray's raylet on a worker process it lost ("A worker died or was killed while executing a task by
    # an unexpected system error. ... Worker exit type: SYSTEM_ERROR")
    # The message runs to the end of Ray's "Worker exit detail" when the record carries one (its cause).
    FatalRule("A worker died or was killed", r"(?P<message>A worker died or was killed while executing a task[^.]*(?:\..*?Worker exit detail: [^.]*)?)", rank=4, anywhere=True, kind=DEATH),
    # uvicorn cannot bind its port (both engines): the server never came up, even after uvicorn's
    # "Application startup complete" (printed before it binds):
    # "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8080): address already in use"
    FatalRule("ERROR:    [Errno ", r"ERROR:\s+(?P<message>\[Errno \d+\] .+)$", "OSError", rank=5, startup=True, kind=ERROR_LINE),
    # a device runtime's own error record inside a log line (torch_npu / CANN on Ascend):
    # "[ERROR] 2025-06-03-14:54:23 (PID:8648, Device:0, RankID:-1) ERR00100 PTA call acl api failed."
    FatalRule("[ERROR] ", r"\[ERROR\] \S+ \(PID:\s?\d+[^)]*\) (?P<message>.+?)\s*$", rank=3, anywhere=True),
    # a C++ runtime's error- or fatal-level record that says what failed ("...: CUDA error: ...",
    # "Check failed: ..."): its own failure, with no Python exception (a record that only points
    # elsewhere, "received errors ... check rank 0 logs", or retries a socket, is not a cause)
    FatalRule(".cpp:", _CPP_EF + r"(?P<message>.*?\b(?:[Ee]xception|[Ee]rror|[Ff]ailed)\b: .*)$", rank=3, anywhere=True),
    # ... or says what failed with what ("[rank10]:[E130 18:11:34.707 ProcessGroupGloo.cpp:143] Gloo
    # connectFullMesh failed with [../gloo/transport/tcp/pair.cc:144] no error")
    FatalRule(".cpp:", _CPP_EF + r"(?P<message>.*?\b[Ff]ailed with\b.*?)\s*$", rank=3, anywhere=True),
    # a C++ runtime's error- or fatal-level record that a wait ran out ("[E1226 15:44:09.437 socket.cpp:1011]
    # [c10d] The client socket has timed out after 600000ms while trying to connect to (host, 8000)."):
    # the last of its retries (the earlier ones say "failed to connect" and go on)
    FatalRule(" timed out after ", _CPP_EF + r"(?P<message>.*?\btimed out after \d+ ?(?:ms|milliseconds|s|seconds)\b.*?)\s*$", rank=3, anywhere=True),
    # a C++ exception's own report (c10::Error, before its native frames): "Exception raised from
    # ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1601 (most recent call
    # first):" names where the runtime failed, when its message is above the window or is its record's
    FatalRule("Exception raised from ", r"^(?P<message>Exception raised from \S+ at \S+:\d+)", rank=3, anywhere=True, above=True),
    # a CUDA driver call's failure as a native extension reports it ("[torch_memory_saver.cpp] CUresult error
    # result=1 file=csrc/torch_memory_saver.cpp func=resume line=214"): its own failure, no Python exception
    FatalRule("CUresult error", r"(?P<message>CUresult error\b.*?)\s*$", rank=3, anywhere=True),
    # NCCL's own warning that a call failed ("host:508:508 [0] init.cc:426 NCCL WARN Cuda failure 'operation
    # not supported'", "NCCL WARN Call to ibv_modify_qp failed", "NCCL WARN NET/Socket : Connect to ... failed"):
    # NCCL may retry or fall back, so it counts only when the run failed otherwise (as below); then it says
    # what a wrapper's cut traceback ("WorkerProc failed to start.") does not
    FatalRule(
        "NCCL WARN ",
        r"NCCL WARN (?P<message>(?:Cuda failure\b|.*?\b(?:failed|[Ee]rror)\b).*?)\s*$",
        rank=7,
        anywhere=True,
        weak=True,
    ),
    # a native communication library's own error record (UCX, UCS, NIXL's UCX backend: "[1754890927.298391]
    # [host:270 :0]  ib_mlx5dv_md.c:1100 UCX  ERROR mlx5_7: ibv_modify_qp(...) failed to modify to RTR: No
    # such device"): the library may recover, so it counts only when the run failed otherwise, and an
    # exception the engine logged over it (its repr on an error record, "nixlBackendError('NIXL_ERR_BACKEND')")
    # says more; a wrapper ("EngineCore failed to start.") says less
    FatalRule(
        "  ERROR ",
        r"(?P<where>[\w.-]+\.(?:c|cc|cpp|cu):\d+) +[A-Z][A-Z0-9]{1,7} +(?:ERROR|FATAL) +(?P<message>\S.*?)\s*$",
        rank=7,
        anywhere=True,
        weak=True,
    ),
    # Kubernetes' and launchers' words for a dead container: "Crashed container in pod: vllm-0",
    # "Back-off restarting failed container", "OOMKilled", "CrashLoopBackOff"
    FatalRule("rashed container", r"(?P<message>[Cc]rashed container\b.*?)\s*$", rank=4, anywhere=True, kind=DEATH),
    FatalRule("restarting failed container", r"(?P<message>[Bb]ack-off restarting failed container.*?)\s*$", rank=4, anywhere=True, kind=DEATH),
    FatalRule("OOMKilled", r"(?P<message>.*\bOOMKilled\b.*?)\s*$", rank=4, anywhere=True, kind=KILLED),
    FatalRule("CrashLoopBackOff", r"(?P<message>.*\bCrashLoopBackOff\b.*?)\s*$", rank=4, anywhere=True, kind=DEATH),
    # a launcher's own statement of why the server did not start (KServe's model server):
    # "kserve ERROR [__main__.py:<module>():254] Failed to start model server: integer division or modulo by zero"
    # (when what follows is only a wrapper, "See root cause above", it counts as that wrapper)
    # ... and a launcher's or a backend's word that the server failed to come up, with the exception
    # it names ("Failed to initialize Python stub: AttributeError: 'AsyncLLM' object has no attribute 'engine'");
    # the statement is the message, with the tag of the backend that said it (Triton's glog record
    # "E1216 02:12:49.624646 179 model.py:248] \"[vllm] Failed to start engine: NoneType: None\\n\"", where
    # "NoneType: None" is Python's word for no exception at all)
    FatalRule(
        "Failed to ",
        r"(?P<message>(?:\[[\w.-]+\] )?Failed to (?:start|initiali[sz]e|launch|load|create|spawn)\b[\w .-]{0,40}: "
        r"(?:(?P<exception>[A-Za-z_][\w.]*(?:Error|Exception)): )?.+?)(?:\\n)?\"?\s*$",
        rank=6,
        anywhere=True,
        kind=ERROR_LINE,
    ),
    # a program's own statement of what failed, on a line with no level or an error level: "Error
    # loading model: The model's max seq len (131072) is larger than ...", "Error in model execution: ..."
    FatalRule(
        "Error ",
        r"(?:^|[\s\]>|-])Error (?:\w+ing|in|during|while)\b[^:]{0,60}: (?P<message>\S.*?)\s*$",
        rank=6,
        anywhere=True,
        levels=("", "ERROR", "CRITICAL", "FATAL"),
        kind=ERROR_LINE,
    ),
    # argparse's refusal of the command line ("vllm serve: error: argument --limit-mm-per-prompt:
    # Value image:4 cannot be converted ...", "launch_server.py: error: unrecognized arguments: --x"):
    # the process exits before it starts
    FatalRule(
        ": error: ",
        r"(?:^|[\s\"'])(?P<where>[\w.-]+(?: [\w-]+)?): error: (?P<message>(?:argument |unrecognized arguments|the following arguments).*?)[\"']?\s*$",
        rank=5,
        anywhere=True,
        startup=True,
        kind=ERROR_LINE,
    ),
    # an exception's repr on an error record, before its traceback or without one:
    # "ERROR engine.start: nixlBackendError('NIXL_ERR_BACKEND')"
    FatalRule("Error('", _REPR, rank=6, anywhere=True, levels=("ERROR", "CRITICAL", "FATAL"), kind=ERROR_LINE),
    # an exception line behind a capture tool's column separator on a log too short to learn the
    # prefix from (a table row, a viewer's pipe: "U | 2025-07-18 11:29:37.824 | worker |   | ray.exceptions.
    # ActorDiedError: The actor died ..."); once a prefix is learnt the line reads without it
    FatalRule("Error: ", r"\| +(?P<exception>(?:[A-Za-z_]\w*\.)*[A-Z]\w*Error): (?P<message>\S.*?)\s*$", rank=6, anywhere=True, kind=ERROR_LINE),
    FatalRule('Error("', _REPR, rank=6, anywhere=True, levels=("ERROR", "CRITICAL", "FATAL"), kind=ERROR_LINE),
)
#: Lines worth a hint when nothing else explains a failure, wherever they are in the line: NCCL's own
#: warnings ("NCCL WARN socketStartConnect: Connect to ... failed") and PyTorch's barrier report that
#: names the rank that failed first.
NOTABLE_ANYWHERE = ("NCCL WARN", "monitoredBarrier")
#: A warning-level record that names a failure (kind ``WARNED``): an exception's repr ("Failed to import
#: from vllm._C with ImportError('libcuda.so.1: cannot open shared object file ...')"), a timeout
#: ("[W208 00:55:32.444 socket.cpp:487] [c10d] waitForInput: socket ... timed out after 1800000ms").
#: Alone it fails nothing; a traceback cut before its exception line right after it is said with it.
FAILURE_WARNING_NEEDLES = ("Error('", 'Error("', "Exception('", "timed out", "Failed to ")
#: (at a logger's warning level, or a C++ runtime's "[W..." record: this regex)
_CPP_W = re.compile(_CPP_RECORD.format(lvl="W"))
#: How a hint reads a failed stage (the frames say where an excerpt's traceback failed).
STAGE_CONTEXT = {
    "config": "during distributed set-up",
    "weights": "during weight loading",
    "drafter": "while loading the drafter",
    "compile": "during torch.compile",
    "kv_cache": "during memory profiling",
    "cuda_graphs": "during CUDA graph capture",
    "warmup": "during warm-up",
}


@dataclass
class Rule:
    needle: str
    kind: int
    stages: tuple[int, ...] = ()
    event: str = ""
    regex: re.Pattern[str] | None = None
    detail: str | None = None
    extra: Any = None
    anywhere: bool = False


def compile_rules(g: LogGrammar) -> list[Rule]:
    idx = {n: i for i, n in enumerate(STAGES)}
    rules: list[Rule] = []
    for r in g.stage_rules:
        rules.append(Rule(r.needle, STAGE, tuple(idx[s] for s in r.stages), r.event, re.compile(r.regex) if r.regex else None, r.detail))
    for b in g.bars:
        rules.append(Rule(b.needle, BAR, tuple(idx[s] for s in b.stages), regex=re.compile(b.regex)))
    for n in g.ready:
        rules.append(Rule(n, READY))
    for n in g.shutdown:
        rules.append(Rule(n, SHUTDOWN))
    for f in (*g.fatal, *FATAL_EVIDENCE):
        rules.append(Rule(f.needle, FATAL, regex=re.compile(f.regex) if f.regex else None, extra=f, anywhere=f.anywhere))
        if f.then:
            rules.append(Rule(f.then, FATAL_THEN, extra=f, anywhere=True))
    for n in g.warnings:
        rules.append(Rule(n, WARN))
    for n in NOTABLE_ANYWHERE:
        rules.append(Rule(n, WARN, anywhere=True))
    for n in FAILURE_WARNING_NEEDLES:
        rules.append(Rule(n, WARNED, regex=_CPP_W, anywhere=True))
    for kind, table in ((UP, g.up), (SERVED, g.serving), (SERVING_ERROR, g.serving_errors)):
        for e in table:
            rules.append(Rule(e.needle, kind, regex=re.compile(e.regex) if e.regex else None, anywhere=e.anywhere))
    for m in g.metrics:
        rules.append(Rule(m.needle, METRIC, regex=re.compile(m.regex), extra=m.kind))
    for name, rx in g.spec_settings.items():
        rules.append(Rule(rx[0], SETTING, regex=re.compile(rx[1]), extra=name))
    return rules


def to_number(s: str | None) -> float | None:
    """A printed figure (thousands commas allowed) as a float; None when missing, unparsable or NaN."""
    if s is None:
        return None
    try:
        v = float(s.replace(",", ""))
    except ValueError:
        return None
    return None if math.isnan(v) else v
