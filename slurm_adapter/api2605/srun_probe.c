/*
 * Slurm 26.05's srun: whether it ended the step it launches.  srun ends a
 * step (a second Ctrl-C, SIGTERM, SIGHUP, SIGQUIT, a broken pipe: signals.c)
 * by launch_fwd_signal(SIGKILL), which aborts the step's launch
 * (slurm_step_launch_abort: its launch state's `abort`).  srun exports the
 * job it launches first, srun_first_job under srun_first_job_lock
 * (srun_job.c, set by pre_launch_srun_job just before the launch): looked
 * up at run time, as the plugin is loaded by sbatch and salloc too.
 *
 * The launch state's `abort` is set for more than srun's own ending: a node
 * whose launch failed (step_launch.c, _fail_step_tasks: its slurmd is down)
 * and the step's completion (_job_complete_handler) set it too, after
 * marking tasks exited.  Those are no signal: the broadcast then goes on
 * until it ends by itself, mostly with its own error naming the node, or
 * until srun's exit.  So an abort counts while no task has exited (at the
 * launch no task has, unless a node failed it).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#include "src/api/step_launch.h"
#include "src/common/bitstring.h"
#include "src/common/step_ctx.h"
#include "src/srun/srun_job.h"

int storm_srun_step_aborted(void);

int storm_srun_step_aborted(void)
{
	static srun_job_t **first;
	static pthread_mutex_t *lock;
	int aborted = 0;

	if (!first) {
		first = dlsym(RTLD_DEFAULT, "srun_first_job");
		lock = dlsym(RTLD_DEFAULT, "srun_first_job_lock");
	}
	if (!first || !lock)
		return -1;
	pthread_mutex_lock(lock);
	if (*first) {
		srun_job_t *job = *first;
		if (job->state >= SRUN_JOB_CANCELLED)
			aborted = 1;
		else if (job->step_ctx && job->step_ctx->launch_state) {
			step_launch_state_t *sls = job->step_ctx->launch_state;

			pthread_mutex_lock(&sls->lock);
			if (sls->abort && (!sls->tasks_exited ||
					   !bit_set_count(sls->tasks_exited)))
				aborted = 1;
			pthread_mutex_unlock(&sls->lock);
		}
	}
	pthread_mutex_unlock(lock);
	return aborted;
}
