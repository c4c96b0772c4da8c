"""Run folders and the jobs over them: records written atomically and read back (records), a run
folder's checks and its log on resume (runlog), one owner per folder (runlock), every output path of
a study (layout), a trained run folder's model and tokenizer loaded back (load), the pipeline's jobs
(jobs), and the figure style with its byte-stable saver (plot)."""
