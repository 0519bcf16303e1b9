/*
 * Slurm 22.05's srun: whether it ended the step it launches.
 *
 * srun ends a step (a second Ctrl-C, SIGTERM, SIGHUP, SIGQUIT, a broken
 * pipe) from its signal thread (sigwait in src/srun/libsrun/srun_job.c,
 * _srun_signal_mgr) through launch_g_fwd_signal(SIGKILL or SIGINT), which
 * calls its launch plugin's launch_p_fwd_signal through srun's table of the
 * plugin's entry points (src/srun/libsrun/launch.c: `static plugin_ops_t
 * ops`, filled by plugin_context_create in the order of its syms[]).  srun
 * exports no pointer to the job it launches, so the only place a plugin
 * can hear of it is that call: the table's fwd_signal slot is pointed at
 * _fwd_signal below, which notes the signal and calls the plugin's own.
 *
 * The table is found the way srun filled it: launch/slurm's (LaunchType's
 * default, the only launcher Storm supports on 22.05) eight entry points,
 * looked up in the loaded launch_slurm.so, side by side in one of srun's
 * writable segments.  If it is not found (another launcher), the probe
 * answers -1 and srun's exit cancels the broadcast instead.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

int storm_srun_step_aborted(void);

#define NSYMS 8
static const char *syms[NSYMS] = {
	"launch_p_setup_srun_opt",  "launch_p_handle_multi_prog_verify",
	"launch_p_create_job_step", "launch_p_step_launch",
	"launch_p_step_wait",       "launch_p_step_terminate",
	"launch_p_print_status",    "launch_p_fwd_signal",
};

static void (*_slurm_fwd_signal)(int);
static volatile sig_atomic_t _aborted;

static void _fwd_signal(int signal)
{
	if ((signal == SIGKILL) || (signal == SIGINT))
		_aborted = 1;
	_slurm_fwd_signal(signal);
}

static int _find_launch_slurm(struct dl_phdr_info *info, size_t size,
			      void *arg)
{
	const char *name = info->dlpi_name, *base;

	(void) size;
	if (!name || !(base = strrchr(name, '/')) ||
	    strcmp(base, "/launch_slurm.so"))
		return 0;
	*(const char **) arg = name;
	return 1;
}

static void *_ops[NSYMS];
static void **_slot;

static int _find_ops(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void) size;
	(void) arg;
	if (info->dlpi_name && info->dlpi_name[0])
		return 0; /* srun itself comes first, with no name */
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if ((ph->p_type != PT_LOAD) || !(ph->p_flags & PF_W))
			continue;
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		uintptr_t hi = lo + ph->p_memsz;
		lo = (lo + sizeof(void *) - 1) & ~(uintptr_t)(sizeof(void *) - 1);
		for (void **p = (void **) lo;
		     (uintptr_t) (p + NSYMS) <= hi; p++) {
			if (!memcmp(p, _ops, sizeof(_ops))) {
				_slot = &p[NSYMS - 1];
				return 1;
			}
		}
	}
	return 1;
}

static int _install(void)
{
	const char *path = NULL;
	void *h;

	dl_iterate_phdr(_find_launch_slurm, &path);
	if (!path || !(h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD)))
		return -1;
	for (int i = 0; i < NSYMS; i++)
		if (!(_ops[i] = dlsym(h, syms[i]))) {
			dlclose(h);
			return -1;
		}
	dlclose(h); /* srun's own reference keeps it loaded */
	dl_iterate_phdr(_find_ops, NULL);
	if (!_slot)
		return -1;
	_slurm_fwd_signal = (void (*)(int)) _ops[NSYMS - 1];
	__atomic_store_n(_slot, (void *) _fwd_signal, __ATOMIC_SEQ_CST);
	return 0;
}

int storm_srun_step_aborted(void)
{
	static int installed; /* 0: not yet, 1: in place, -1: not found */

	if (!installed)
		installed = _install() ? -1 : 1;
	if (installed < 0)
		return -1;
	return _aborted ? 1 : 0;
}
