/*
 * Slurm 24.11's srun: whether it ended the step it launches.  Its signal
 * thread (sigwait in src/srun/srun_job.c, _srun_signal_mgr) aborts
 * the launch through a job list private to srun, and srun exports no
 * pointer to its job: nothing a plugin can read.  So -1: cli_filter/storm
 * cancels a broadcast still under way only when srun exits
 * (plugins/cli_filter_storm/README.md).
 */
int storm_srun_step_aborted(void);

int storm_srun_step_aborted(void)
{
	return -1;
}
