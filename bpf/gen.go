package bpf

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu" -target amd64 -type api_event -type sync_exit_event -type lib_event -type proc_event -type py_config -type code_key -type code_class -type sp_api -type sp_event_type -type sp_py_flags -type sp_cfg_flags -type sp_track_flags -type sp_class_flags -type sp_lost -type sample_event -type thread_cycle -type sp_cyccfg -type sp_sample_flags specprof c/specprof.bpf.c -- -I./c
