// test_switch_rdma's way into switch/rdma on Slurm's 22.05 switch API: the
// entry points this generation's Slurm calls, behind the calls the test
// makes on every generation (tests/unit/api<GEN>/switch_rdma_api.hpp, the
// one of the configured line on the include path).
#pragma once

#include <string>

namespace switch_api {

// This process plays slurmctld (before any running_in_*()).
inline void play_slurmctld() { slurm_prog_name = xstrdup("slurmctld"); }

struct Api {
    int (*init_)(void);
    int (*fini_)(void);
    int (*reconfig_)(void);
    int (*save_)(char *);
    int (*restore_)(char *, bool);
    int (*clear_)(void);
    int (*alloc_)(void **, uint32_t, uint32_t);
    int (*build_)(void *, slurm_step_layout_t *, step_record_t *);
    int (*dup_)(void *, void **);
    void (*free__)(void *);
    int (*pack_)(void *, buf_t *, uint16_t);
    int (*unpack_)(void **, buf_t *, uint16_t);
    int (*get_)(void *, int, void *);
    int (*job_init_)(stepd_step_rec_t *);
    int (*attach_)(void *, char ***, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t);
    int (*postfini_)(stepd_step_rec_t *);
    int (*step_complete_)(void *, char *);
    int (*step_allocated_)(void *, char *);
    void (*job_complete_)(uint32_t);

    // sym(pointer, name) looks each entry point up.
    template <class Sym> void load(Sym &&sym)
    {
        sym(init_, "init");
        sym(fini_, "fini");
        sym(reconfig_, "switch_p_reconfig");
        sym(save_, "switch_p_libstate_save");
        sym(restore_, "switch_p_libstate_restore");
        sym(clear_, "switch_p_libstate_clear");
        sym(alloc_, "switch_p_alloc_jobinfo");
        sym(build_, "switch_p_build_jobinfo");
        sym(dup_, "switch_p_duplicate_jobinfo");
        sym(free__, "switch_p_free_jobinfo");
        sym(pack_, "switch_p_pack_jobinfo");
        sym(unpack_, "switch_p_unpack_jobinfo");
        sym(get_, "switch_p_get_jobinfo");
        sym(job_init_, "switch_p_job_init");
        sym(attach_, "switch_p_job_attach");
        sym(postfini_, "switch_p_job_postfini");
        sym(step_complete_, "switch_p_job_step_complete");
        sym(step_allocated_, "switch_p_job_step_allocated");
        sym(job_complete_, "switch_p_job_complete");
    }

    int init() { return init_(); }
    int fini() { return fini_(); }
    // `scontrol reconfigure`: slurmctld rereads SwitchParameters in place.
    int reconfig(const std::string &) { return reconfig_(); }
    int save(const std::string &dir) { return save_(const_cast<char *>(dir.c_str())); }
    int restore(const std::string &dir, bool recover)
    {
        return restore_(const_cast<char *>(dir.c_str()), recover);
    }
    void clear(const std::string &) { clear_(); }
    // A step's switch info, as slurmctld builds it at step creation.
    int build(void **out, slurm_step_layout_t *layout, step_record_t *step)
    {
        int rc = alloc_(out, step->step_id.job_id, step->step_id.step_id);
        if (rc != SLURM_SUCCESS)
            return rc;
        errno = 0;
        return build_(*out, layout, step);
    }
    int duplicate(void *src, void **dest) { return dup_(src, dest); }
    void free_(void *info) { free__(info); }
    int pack(void *info, buf_t *buf) { return pack_(info, buf, SLURM_PROTOCOL_VERSION); }
    int unpack(void **info, buf_t *buf) { return unpack_(info, buf, SLURM_PROTOCOL_VERSION); }
    // switch_p_get_jobinfo, on the generations that have it.
    bool has_get() const { return true; }
    int get(void *info, int key, void *out) { return get_(info, key, out); }
    void *empty()
    {
        void *info = nullptr;
        alloc_(&info, 1, 1);
        return info;
    }
    void set_info(stepd_step_rec_t &step, dynamic_plugin_data_t *info) { step.switch_job = info; }
    int job_init(stepd_step_rec_t *step) { return job_init_(step); }
    int attach(void *info, char ***env) { return attach_(info, env, 0, 0, 1, 1, 0); }
    int postfini(stepd_step_rec_t *step) { return postfini_(step); }
    int step_complete(void *info, char *nodes) { return step_complete_(info, nodes); }
    // slurmctld restarted: a step it recovered from its job state.
    void recover(void *info, char *nodes) { step_allocated_(info, nodes); }
    void job_complete(job_record_t *job) { job_complete_(job->job_id); }
};

} // namespace switch_api
