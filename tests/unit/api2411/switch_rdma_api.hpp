// test_switch_rdma's way into switch/rdma on Slurm's 24.11 switch API: the
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
    int (*save_)(void);
    int (*restore_)(bool);
    int (*build_)(void **, slurm_step_layout_t *, step_record_t *);
    void (*dup_)(void *, void **);
    void (*free__)(void *);
    void (*pack_)(void *, buf_t *, uint16_t);
    int (*unpack_)(void **, buf_t *, uint16_t);
    int (*job_init_)(stepd_step_rec_t *);
    int (*attach_)(void *, char ***, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t);
    int (*postfini_)(stepd_step_rec_t *);
    int (*step_complete_)(void *, char *);
    void (*job_complete_)(job_record_t *);

    template <class Sym> void load(Sym &&sym)
    {
        sym(init_, "init");
        sym(fini_, "fini");
        sym(save_, "switch_p_save");
        sym(restore_, "switch_p_restore");
        sym(build_, "switch_p_build_stepinfo");
        sym(dup_, "switch_p_duplicate_stepinfo");
        sym(free__, "switch_p_free_stepinfo");
        sym(pack_, "switch_p_pack_stepinfo");
        sym(unpack_, "switch_p_unpack_stepinfo");
        sym(job_init_, "switch_p_job_init");
        sym(attach_, "switch_p_job_attach");
        sym(postfini_, "switch_p_job_postfini");
        sym(step_complete_, "switch_p_job_step_complete");
        sym(job_complete_, "switch_p_job_complete");
    }

    int init() { return init_(); }
    int fini() { return fini_(); }
    int save(const std::string &dir)
    {
        xfree(slurm_conf.state_save_location);
        slurm_conf.state_save_location = xstrdup(dir.c_str());
        return save_();
    }
    int restore(const std::string &dir, bool recover)
    {
        xfree(slurm_conf.state_save_location);
        slurm_conf.state_save_location = xstrdup(dir.c_str());
        return restore_(recover);
    }
    // `scontrol reconfigure` restarts slurmctld: the table saved, the
    // plugin loaded again, the table restored (its steps' jobs live on).
    int reconfig(const std::string &dir)
    {
        if (save(dir) != SLURM_SUCCESS)
            return SLURM_ERROR;
        fini();
        if (init() != SLURM_SUCCESS)
            return SLURM_ERROR;
        return restore(dir, true);
    }
    // No libstate_clear: slurmctld -c starts empty.
    void clear(const std::string &dir) { restore(dir, false); }
    int build(void **out, slurm_step_layout_t *layout, step_record_t *step)
    {
        errno = 0;
        return build_(out, layout, step);
    }
    int duplicate(void *src, void **dest)
    {
        dup_(src, dest);
        return *dest ? SLURM_SUCCESS : SLURM_ERROR;
    }
    void free_(void *info) { free__(info); }
    int pack(void *info, buf_t *buf)
    {
        pack_(info, buf, SLURM_PROTOCOL_VERSION);
        return SLURM_SUCCESS;
    }
    int unpack(void **info, buf_t *buf) { return unpack_(info, buf, SLURM_PROTOCOL_VERSION); }
    bool has_get() const { return false; }
    int get(void *, int, void *) { return SLURM_ERROR; }
    void *empty()
    {
        buf_t *buf = init_buf(64);
        pack(nullptr, buf);
        buf->size = get_buf_offset(buf);
        set_buf_offset(buf, 0);
        void *info = nullptr;
        unpack(&info, buf);
        free_buf(buf);
        return info;
    }
    void set_info(stepd_step_rec_t &step, dynamic_plugin_data_t *info) { step.switch_step = info; }
    int job_init(stepd_step_rec_t *step) { return job_init_(step); }
    int attach(void *info, char ***env) { return attach_(info, env, 0, 0, 1, 1, 0); }
    int postfini(stepd_step_rec_t *step) { return postfini_(step); }
    int step_complete(void *info, char *nodes) { return step_complete_(info, nodes); }
    // slurmctld restarted: a step it recovered from its job state, whose
    // stepinfo it unpacks.
    void recover(void *info, char *)
    {
        buf_t *buf = init_buf(1024);
        pack(info, buf);
        buf->size = get_buf_offset(buf);
        set_buf_offset(buf, 0);
        void *copy = nullptr;
        unpack(&copy, buf);
        free_(copy);
        free_buf(buf);
    }
    void job_complete(job_record_t *job) { job_complete_(job); }
};

} // namespace switch_api
