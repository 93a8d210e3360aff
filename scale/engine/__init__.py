"""The training engine: data on the device, augmentation, backbones, heads, objectives, the method
registry, the trainer and its hooks.

    data, safe_pickle, checksums   datasets as uint8 tensors (CIFAR read without executing its pickles)
    augment                        the augmentation presets, batched on the device or per image in workers
    workers                        worker processes that live and die with the run that forked them
    backbones, heads               f: images -> z and h: z -> h (the head grammar of ``mini.heads``)
    pretrained_models              the published SSL checkpoints of E6, in their authors' layouts
    objectives, methods            the SSL losses, and one record per method that everything else reads
    loss_curvature                 objectives whose loss Hessian is known in closed form (a method's record)
    recipes                        the one resolution of a run's settings (scale.run, TrainConfig.resolve)
    modules                        your own modules: module:callable specs, the record a run keeps of them
    train, hooks, modes            the Trainer, its built-in hooks, eval mode for measurements
    progress                       long measurements announced phase by phase, with an estimate of the rest
    checkpoint, signals            atomic files and checkpoints; SIGINT/SIGTERM: finish the step, save, stop
"""
